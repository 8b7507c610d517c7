/* err.c: names and messages of the LOOM_E* codes, from the one table in
 * loom.h. */
#include "loom.h"

const char *loom_strerror(int code) {
  switch (code) {
  case 0:
    return "success";
#define LOOM__ERR_MSG(name, val, msg)                                                              \
  case val:                                                                                        \
    return msg;
    LOOM_ERRNO_MAP(LOOM__ERR_MSG)
#undef LOOM__ERR_MSG
  }
  return "unknown error";
}

const char *loom_err_name(int code) {
  switch (code) {
  case 0:
    return "LOOM_OK";
#define LOOM__ERR_NAME(name, val, msg)                                                             \
  case val:                                                                                        \
    return "LOOM_" #name;
    LOOM_ERRNO_MAP(LOOM__ERR_NAME)
#undef LOOM__ERR_NAME
  }
  return "LOOM_E?";
}
