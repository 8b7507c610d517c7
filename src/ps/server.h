/* server.h: the built-in parameter server, run as `loom ps` by a ps role. */
#ifndef LOOM_PS_SERVER_H
#define LOOM_PS_SERVER_H

/* `loom ps [ARGS]` (argv[0] is "ps"): serves this task's shard until
 * SIGTERM. Returns the process exit status. */
int loom__ps_main(int argc, char **argv);

#endif
