/* creds.h: Hadoop's credentials file, the one a NodeManager writes into
 * each container (HADOOP_TOKEN_FILE_LOCATION, from the container launch
 * context's tokens): the reader that finds a token or a secret key in it
 * and the writer of the secret keys loom hands its task containers
 * (creds.c). Pure: bytes in, bytes out; the hadoop_creds fuzz harness
 * drives the readers, creds_test the round trip. */
#ifndef LOOM_HADOOP_CREDS_H
#define LOOM_HADOOP_CREDS_H

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
/* The same for a token of kind whose service is service (NULL: any):
 * HDFS_DELEGATION_TOKEN for "10.0.0.1:8020". */
int hyarn_creds_find_for(const uint8_t *buf, size_t len, const char *kind, const char *service,
                         hyarn_cred_token *out, char *err, size_t errlen);

/* The secret key under which a YARN task container's credentials carry
 * the job's secret (never its environment: the NodeManager writes that
 * into launch_container.sh, which log aggregation uploads). */
#define HYARN_CREDS_JOB_SECRET "loom.job.secret"

/* The most bytes an alias or a value may have, and the most secret keys,
 * in what hyarn_creds_encode writes. */
#define HYARN_CREDS_MAX_FIELD (1 << 20)
#define HYARN_CREDS_MAX_SECRETS 64

/* One secret key: alias -> len bytes of value. */
typedef struct {
  const char *alias;
  const uint8_t *value;
  size_t len;
} hyarn_cred_secret;

/* Writes Hadoop's Credentials holding no token and the n secret keys, as
 * Credentials.writeTokenStorageToStream does in its WRITABLE format
 * ("HDTS", 0, a VInt token count of 0, a VInt secret count, each secret
 * a Text alias then a VInt length and the bytes): the bytes of a
 * ContainerLaunchContext's tokens. Returns 0 with *out (the caller
 * frees) and *outlen, LOOM_EINVAL when n is negative or over
 * HYARN_CREDS_MAX_SECRETS or an alias or value is missing or over
 * HYARN_CREDS_MAX_FIELD bytes, or LOOM_ENOMEM. */
int hyarn_creds_encode(const hyarn_cred_secret *secrets, int n, uint8_t **out, size_t *outlen);
/* The same with ntok tokens first (at most HYARN_CREDS_MAX_SECRETS; each
 * written as Token.write: a Text alias, its service, then the VInt-long
 * identifier and password and the Text kind and service): the file
 * `loom fs fetchdt` writes, as `hdfs fetchdt` does. */
int hyarn_creds_encode_all(const hyarn_cred_token *tokens, int ntok,
                           const hyarn_cred_secret *secrets, int n, uint8_t **out, size_t *outlen);

/* Finds the secret key alias in the bytes of a credentials file (either
 * format, as hyarn_creds_find). Returns 0 with *value (the caller frees;
 * one byte more than *len, a 0, so a text secret is a C string) and
 * *len, LOOM_ENOENT when no secret of that alias is there, or
 * LOOM_EPROTO with err saying what is malformed. */
int hyarn_creds_find_secret(const uint8_t *buf, size_t len, const char *alias, uint8_t **value,
                            size_t *vlen, char *err, size_t errlen);

#endif
