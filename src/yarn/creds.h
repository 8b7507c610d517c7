/* creds.h: Hadoop's credentials file, the one a NodeManager writes into a
 * managed application master's container (HADOOP_TOKEN_FILE_LOCATION):
 * the reader that finds a token in it (creds.c). Pure: bytes in, a token
 * out; the hadoop_creds fuzz harness drives it. */
#ifndef LOOM_YARN_CREDS_H
#define LOOM_YARN_CREDS_H

#include "core/core.h"

#include <stddef.h>
#include <stdint.h>

/* A token found in a Hadoop credentials file. */
typedef struct {
  uint8_t *identifier, *password;
  size_t identifier_len, password_len;
  char kind[128], service[256];
} hyarn_cred_token;

/* Finds the first token of kind ("YARN_AM_RM_TOKEN") in the bytes of a
 * credentials file (Hadoop's Credentials: "HDTS", a format byte, then
 * the WRITABLE layout with Hadoop's VInts, or a delimited
 * CredentialsProto). Returns 0 with *out (hyarn_cred_token_free),
 * LOOM_ENOENT when no token of that kind is there, or LOOM_EPROTO with
 * err saying what is malformed. Every length is checked against what is
 * left. */
int hyarn_creds_find(const uint8_t *buf, size_t len, const char *kind, hyarn_cred_token *out,
                     char *err, size_t errlen);
void hyarn_cred_token_free(hyarn_cred_token *t);

#endif
