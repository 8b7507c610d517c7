/* lib.h: what libloom's parts (comm, and later ps, feed) may use of the
 * handle beyond the public API. Only libloom's own files include this. */
#ifndef LOOM_LIB_H
#define LOOM_LIB_H

#include "loom.h"
#include <stdarg.h>

/* Sets the handle's detail text and returns code, for `return
 * loom__fail(l, LOOM_EPEER, "rank %d closed its connection", r);`. */
int loom__fail(loom_t *l, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A file descriptor that becomes readable (and stays readable) once the
 * coordinator has aborted this attempt or the connection to it is lost.
 * Collectives poll it next to their peers' sockets. -1 without a
 * coordinator. */
int loom__abort_fd(const loom_t *l);
/* 0 while the attempt is live; LOOM_EABORTED or LOOM_ECONN afterwards. */
int loom__aborted(const loom_t *l);

/* The name of this host as the job knows it (LOOM_HOST, else gethostname),
 * used to decide which peers share memory with us. */
const char *loom__host(const loom_t *l);

/* A slot for the collectives' private state, created on first use and torn
 * down by loom__comm_fini() from loom_finish(). */
void **loom__comm_slot(loom_t *l);
void loom__comm_fini(loom_t *l);

#endif
