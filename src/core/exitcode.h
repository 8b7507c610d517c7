/* exitcode.h: the exit statuses of every loom command, in one place. The
 * coordinator decides a job's, the CLI (src/cli/) returns them from
 * main(), and the verbs it hands over to (`loom ps`, `loom ui`, `loom fs`)
 * return the same ones. The README's "Exit status" paragraph and the
 * Python package's exceptions (python/loom/errors.py) follow this table. */
#ifndef LOOM_EXITCODE_H
#define LOOM_EXITCODE_H

enum loom_exit {
  LOOM_EXIT_OK = 0,     /* the job (or the command) succeeded */
  LOOM_EXIT_FAILED = 1, /* a task failed past its retries; for `loom fs` and
                           `loom ps`: the operation itself failed */
  LOOM_EXIT_USAGE = 2,  /* usage or spec error, or resources this machine
                           cannot give, or settings that do not load */
  LOOM_EXIT_INFRA = 3,  /* the backend or the infrastructure failed */
  LOOM_EXIT_INTR = 130, /* interrupted: Ctrl-C, SIGTERM or `loom kill` */
};

#endif
