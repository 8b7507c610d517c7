/* fs.c: `loom fs`, files on HDFS (and local paths) from the command line,
 * through loom's own HDFS client: ls, stat, cat, get, put, mkdir, rm, mv, and
 * fetchdt (HDFS delegation tokens). */
#include "cli/fs.h"

#include "core/exitcode.h"
#include "fs/fs.h"
#include "hadoop/hdfs.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int usage_err(const char *fmt, ...) LOOM__PRINTF(1, 2);
static int usage_err(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "loom fs: ");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr,
          "\nusage: loom fs ls|stat|cat|get|put|mkdir|rm|mv|fetchdt ... (loom fs --help)\n");
  return LOOM_EXIT_USAGE;
}

/* The exit status for an error code. */
static int exit_of(int rc) {
  switch (rc) {
  case 0:
    return LOOM_EXIT_OK;
  case LOOM_EINVAL:
    return LOOM_EXIT_USAGE;
  case LOOM_ECONN:
  case LOOM_ETIMEDOUT:
  case LOOM_EBACKEND:
    return LOOM_EXIT_INFRA;
  default:
    return LOOM_EXIT_FAILED;
  }
}

static int fail(int rc, const char *err) {
  fprintf(stderr, "loom fs: %s\n", err[0] ? err : loom_strerror(rc));
  /* hdfs:/// without a configuration is a usage error */
  if (rc == LOOM_ENOENT && strstr(err, "names no NameNode")) return LOOM_EXIT_USAGE;
  return exit_of(rc);
}

static void print_perm(uint32_t p, bool dir, char out[11]) {
  out[0] = dir ? 'd' : '-';
  const char *rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; i++) out[1 + i] = p & (0400u >> i) ? rwx[i] : '-';
  out[10] = 0;
}

static void print_entry(const hdfs_stat *s, const char *name) {
  char perm[11], when[32];
  print_perm(s->perm, s->dir, perm);
  time_t t = (time_t)(s->mtime_ms / 1000);
  struct tm tm;
  localtime_r(&t, &tm); /* as FsShell -ls prints it */
  strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm);
  char repl[16];
  if (s->dir)
    snprintf(repl, sizeof repl, "-");
  else
    snprintf(repl, sizeof repl, "%u", s->replication);
  printf("%s %3s %-10s %-10s %12llu %s %s\n", perm, repl, s->owner, s->group,
         (unsigned long long)s->length, when, name);
}

static int cmd_ls(const char *url) {
  char err[2048] = "";
  if (!loom__fs_remote(url)) return usage_err("ls takes an hdfs:// URL, not %s", url);
  hdfs_url u;
  hdfs *fs;
  int rc = hdfs_parse_url(url, &u, err, sizeof err);
  if (rc == 0) rc = hdfs_get(u.host, u.port, &fs);
  hdfs_stat *v = NULL;
  size_t n = 0;
  if (rc == 0) rc = hdfs_list(fs, u.path, &v, &n, err, sizeof err);
  if (rc < 0) return fail(rc, err);
  size_t ul = strlen(url);
  /* a file lists itself, by its URL; a directory its children */
  hdfs_stat st;
  bool self = n == 1 && hdfs_stat_path(fs, u.path, &st, err, sizeof err) == 0 && !st.dir;
  for (size_t i = 0; i < n; i++) {
    char full[HDFS_MAX_PATH + 1400];
    if (self)
      snprintf(full, sizeof full, "%s", url);
    else
      snprintf(full, sizeof full, "%s%s%s", url, ul && url[ul - 1] == '/' ? "" : "/", v[i].name);
    print_entry(&v[i], full);
  }
  free(v);
  return 0;
}

static int cmd_stat(const char *url) {
  char err[2048] = "";
  if (!loom__fs_remote(url)) return usage_err("stat takes an hdfs:// URL, not %s", url);
  hdfs_url u;
  hdfs *fs;
  hdfs_stat st;
  int rc = hdfs_parse_url(url, &u, err, sizeof err);
  if (rc == 0) rc = hdfs_get(u.host, u.port, &fs);
  if (rc == 0) rc = hdfs_stat_path(fs, u.path, &st, err, sizeof err);
  if (rc < 0) return fail(rc, err);
  char perm[11];
  print_perm(st.perm, st.dir, perm);
  printf("{\"url\": \"%s\", \"type\": \"%s\", \"length\": %llu, \"permission\": \"%s\", "
         "\"owner\": \"%s\", \"group\": \"%s\", \"modification_ms\": %llu, \"replication\": %u, "
         "\"blocksize\": %llu}\n",
         url, st.dir ? "directory" : "file", (unsigned long long)st.length, perm, st.owner,
         st.group, (unsigned long long)st.mtime_ms, st.replication,
         (unsigned long long)st.blocksize);
  return 0;
}

static int cmd_cat(int argc, char **argv) {
  char err[2048] = "";
  size_t cap = 4u << 20;
  char *buf = malloc(cap);
  if (!buf) return LOOM_EXIT_INFRA;
  int status = LOOM_EXIT_OK;
  for (int i = 0; i < argc && status == 0; i++) {
    loom__rfile *f = NULL;
    int rc = loom__rfile_open(argv[i], &f, err, sizeof err);
    for (uint64_t at = 0; rc == 0 && at < loom__rfile_size(f);) {
      size_t got = 0;
      rc = loom__rfile_pread(f, buf, cap, at, &got, err, sizeof err);
      if (rc == 0 && !got) {
        snprintf(err, sizeof err, "%s: ended at %llu of %llu bytes", argv[i],
                 (unsigned long long)at, (unsigned long long)loom__rfile_size(f));
        rc = LOOM_EIO;
      }
      if (rc == 0 && fwrite(buf, 1, got, stdout) != got) {
        snprintf(err, sizeof err, "writing to standard output: %s", strerror(errno));
        rc = LOOM_EIO;
      }
      at += got;
    }
    loom__rfile_close(f);
    if (rc < 0) status = fail(rc, err);
  }
  free(buf);
  if (fflush(stdout) != 0 && status == 0) {
    fprintf(stderr, "loom fs: writing to standard output: %s\n", strerror(errno));
    status = LOOM_EXIT_FAILED;
  }
  return status;
}

/* `loom fs fetchdt [--fs URL] [--renewer NAME] FILE`, `--renew FILE`,
 * `--cancel FILE`: HDFS delegation tokens, as `hdfs fetchdt`. Always over
 * Kerberos: a token in $HADOOP_TOKEN_FILE_LOCATION is not used for them
 * (a NameNode gives, renews and cancels tokens for Kerberos connections). */
static int cmd_fetchdt(int argc, char **argv) {
  const char *url = "hdfs:///", *renewer = "", *file = NULL;
  int op = 0; /* 0 fetch, 1 renew, 2 cancel */
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--fs") && i + 1 < argc)
      url = argv[++i];
    else if (!strcmp(argv[i], "--renewer") && i + 1 < argc)
      renewer = argv[++i];
    else if (!strcmp(argv[i], "--renew"))
      op = 1;
    else if (!strcmp(argv[i], "--cancel"))
      op = 2;
    else if (argv[i][0] == '-' || file)
      return usage_err("fetchdt: unexpected '%s' (fetchdt [--fs URL] [--renewer NAME] FILE | "
                       "--renew FILE | --cancel FILE)",
                       argv[i]);
    else
      file = argv[i];
  }
  if (!file) return usage_err("%s", "fetchdt: no FILE");
  unsetenv("HADOOP_TOKEN_FILE_LOCATION");
  char err[2048] = "", host[256];
  int port = 0, rc;
  hdfs *fs = NULL;
  if (op == 0) {
    hdfs_url u;
    if ((rc = hdfs_parse_url(url, &u, err, sizeof err)) < 0) return fail(rc, err);
    rc = hdfs_get(u.host, u.port, &fs);
    uint8_t *bytes = NULL;
    size_t len = 0;
    if (rc == 0) rc = hdfs_dt_fetch(fs, renewer, &bytes, &len, err, sizeof err);
    if (rc == 0 && loom__write_atomic(file, bytes, len, 0600, true) < 0) {
      snprintf(err, sizeof err, "cannot write %s: %s", file, strerror(errno));
      rc = LOOM_EIO;
    }
    char svc_host[256];
    int svc_port = 0;
    if (rc == 0 &&
        hdfs_dt_service(bytes, len, svc_host, sizeof svc_host, &svc_port, err, sizeof err) == 0)
      printf("%s: %s for %s:%d%s%s\n", file, HDFS_DT_KIND, svc_host, svc_port,
             renewer[0] ? ", renewer " : "", renewer);
    free(bytes);
    return rc < 0 ? fail(rc, err) : LOOM_EXIT_OK;
  }
  char *buf = NULL;
  size_t len = 0;
  if (loom__read_file(file, 64 << 20, &buf, &len) < 0) {
    fprintf(stderr, "loom fs: cannot read %s: %s\n", file, strerror(errno));
    return LOOM_EXIT_USAGE;
  }
  rc = hdfs_dt_service((const uint8_t *)buf, len, host, sizeof host, &port, err, sizeof err);
  if (rc == 0) rc = hdfs_get(host, port, &fs);
  uint64_t until = 0;
  if (rc == 0 && op == 1)
    rc = hdfs_dt_renew(fs, (const uint8_t *)buf, len, &until, err, sizeof err);
  else if (rc == 0)
    rc = hdfs_dt_cancel(fs, (const uint8_t *)buf, len, err, sizeof err);
  free(buf);
  if (rc < 0) return fail(rc, err);
  if (op == 1) {
    char when[40];
    time_t t = (time_t)(until / 1000);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %Z", localtime_r(&t, &tm));
    printf("%s: renewed until %s\n", file, when);
  } else {
    printf("%s: cancelled\n", file);
  }
  return LOOM_EXIT_OK;
}

int loom__fs_main(int argc, char **argv) {
  /* argv[0] is "fs"; --principal and --keytab are the tunables' values
   * for this process (the HDFS client reads them) */
  while (argc >= 3 && (!strcmp(argv[1], "--principal") || !strcmp(argv[1], "--keytab"))) {
    if (!argv[2][0]) return usage_err("%s takes a value", argv[1]);
    setenv(!strcmp(argv[1], "--principal") ? "LOOM_KERBEROS_PRINCIPAL" : "LOOM_KERBEROS_KEYTAB",
           argv[2], 1);
    argv[2] = argv[0];
    argc -= 2;
    argv += 2;
  }
  if (argc >= 2 && (!strcmp(argv[1], "--principal") || !strcmp(argv[1], "--keytab")))
    return usage_err("%s takes a value", argv[1]);
  if (argc < 2) return usage_err("%s", "no command");
  const char *c = argv[1];
  char err[2048] = "";
  int rc;
  if (!strcmp(c, "ls") && argc == 3) return cmd_ls(argv[2]);
  if (!strcmp(c, "stat") && argc == 3) return cmd_stat(argv[2]);
  if (!strcmp(c, "cat") && argc >= 3) return cmd_cat(argc - 2, argv + 2);
  if (!strcmp(c, "get") && argc == 4) {
    rc = loom__fs_get(argv[2], argv[3], err, sizeof err);
    return rc < 0 ? fail(rc, err) : LOOM_EXIT_OK;
  }
  if (!strcmp(c, "put")) {
    bool force = argc == 5 && !strcmp(argv[2], "-f");
    if (argc != 4 && !force) return usage_err("%s", "put [-f] LOCAL URL");
    rc = loom__fs_put(argv[argc - 2], argv[argc - 1], force, err, sizeof err);
    return rc < 0 ? fail(rc, err) : LOOM_EXIT_OK;
  }
  if (!strcmp(c, "mkdir") && argc == 3) {
    rc = loom__fs_mkdirs(argv[2], err, sizeof err);
    return rc < 0 ? fail(rc, err) : LOOM_EXIT_OK;
  }
  if (!strcmp(c, "rm")) {
    bool rec = argc == 4 && !strcmp(argv[2], "-r");
    if (argc != 3 && !rec) return usage_err("%s", "rm [-r] URL");
    rc = loom__fs_remove(argv[argc - 1], rec, err, sizeof err);
    return rc < 0 ? fail(rc, err) : LOOM_EXIT_OK;
  }
  if (!strcmp(c, "fetchdt")) return cmd_fetchdt(argc - 2, argv + 2);
  if (!strcmp(c, "mv") && argc == 4) {
    rc = loom__fs_rename(argv[2], argv[3], false, err, sizeof err);
    return rc < 0 ? fail(rc, err) : LOOM_EXIT_OK;
  }
  return usage_err("bad arguments for '%s'", c);
}
