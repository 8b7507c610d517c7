/* fs.h: `loom fs`, HDFS from the command line (fs.c). */
#ifndef LOOM_CLI_FS_H
#define LOOM_CLI_FS_H

/* argv[0] is "fs". Returns the exit status: 0, 1 a filesystem error (no
 * such path, permission denied, exists, no good replica), 2 usage or a bad
 * URL, 3 the cluster cannot be reached. */
int loom__fs_main(int argc, char **argv);

#endif
