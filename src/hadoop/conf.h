/* conf.h: Hadoop configuration files (core-site.xml, yarn-site.xml,
 * hdfs-site.xml), read the way Hadoop's own Configuration reads them:
 * <property> elements with <name>, <value> and <final> children (or the
 * same as attributes); a later file overrides an earlier one unless the
 * earlier marked the property final; ${name} in a value expands to
 * another property (${env.NAME} to the environment), as deep as Hadoop
 * goes. What is read is bounded: the file's size, the number of
 * properties, each name and value. Nothing here knows a property's
 * meaning: see yarn.h for YARN's addresses. */
#ifndef LOOM_HADOOP_CONF_H
#define LOOM_HADOOP_CONF_H

#include "core/core.h"

/* Bounds on what a configuration may hold. */
#define HCONF_MAX_FILE (4u << 20)
#define HCONF_MAX_PROPS 20000
#define HCONF_MAX_TEXT (64u << 10) /* one name or value, decoded */

typedef struct {
  char *name, *value;
  bool final;
  const char *file; /* the file that set it (hconf's own copy) */
  int line;
} hconf_prop;

/* The caller owns an hconf: zero it ({0}) before the first load, and
 * hconf_free it. */
typedef struct {
  hconf_prop *props;
  int n, cap;
  char **files; /* every file loaded, for hconf_prop.file */
  int nfiles;
} hconf;

/* Adds the properties of the configuration text (len bytes, named file in
 * messages) on top of what c holds. Returns 0, or LOOM_EPROTO (malformed:
 * err says file:line and what), LOOM_ERANGE (a bound passed) or
 * LOOM_ENOMEM; on error c keeps what it held before the call. */
int hconf_parse(hconf *c, const char *text, size_t len, const char *file, char *err, size_t errlen);
/* hconf_parse of the file at path. LOOM_ENOENT when it does not exist,
 * LOOM_EIO when it cannot be read (err names the file and why). */
int hconf_load(hconf *c, const char *path, char *err, size_t errlen);
/* The property as written, or NULL if no file set it. Valid until c
 * changes. */
const hconf_prop *hconf_find(const hconf *c, const char *name);
/* The value of name with ${...} expanded and surrounding white space
 * trimmed (what Hadoop's getTrimmed gives), into out; or def when no file
 * set it (def may be NULL). Returns 1 when found, 0 when def was used (or
 * out is "" for a NULL def), LOOM_ERANGE when the value does not fit in
 * outlen. Unknown ${...} are left as written, as Hadoop does. */
int hconf_get(const hconf *c, const char *name, const char *def, char *out, size_t outlen);
void hconf_free(hconf *c);

/* The configuration directory Hadoop's clients read: conf_dir when not
 * NULL, else $HADOOP_CONF_DIR, else $HADOOP_HOME/etc/hadoop, into out;
 * *how names where it came from, for messages. LOOM_ENOENT with err
 * saying what is missing when none is set or it is not a directory. */
int hconf_find_dir(const char *conf_dir, char *out, size_t outlen, const char **how, char *err,
                   size_t errlen);
/* The user Hadoop's SIMPLE authentication names: HADOOP_USER_NAME, else
 * the login of this process's uid. */
void hconf_user(char *out, size_t len);

#endif
