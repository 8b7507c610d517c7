// bench/hdfs/HdfsBench.java: the Hadoop Java client's side of bench/hdfs,
// run as a single-file program:
//
//   java -cp CONF:HADOOP_JARS bench/hdfs/HdfsBench.java read PATH...
//   java -cp CONF:HADOOP_JARS bench/hdfs/HdfsBench.java write DIR LOCAL...
//   java -cp CONF:HADOOP_JARS bench/hdfs/HdfsBench.java check PATH...
//   java -cp CONF:HADOOP_JARS bench/hdfs/HdfsBench.java mkdir DIR...
//
// The filesystem is FileSystem.get(conf), the configuration from the
// classpath (CONF's core-site.xml and hdfs-site.xml: fs.defaultFS,
// dfs.replication). Each verb prints one line to stdout:
//
//   read:  bytes=N setup_s=S read_s=T   reads every PATH, in order, through
//          a 1 MiB buffer (the bytes are discarded); read_s times the loop
//          (each open, the reads, each close), setup_s what came before it
//          in main (Configuration and FileSystem.get, no RPC yet).
//   write: bytes=N setup_s=S write_s=T  for each LOCAL, FileSystem.create
//          (DIR/its name, overwrite) and the local file's bytes written
//          through a 1 MiB buffer, then close (which waits for the
//          pipeline's last acknowledgement); write_s times that loop.
//   check: PATH len=N replication=R sha256=HEX, one line per PATH.
//   mkdir: mkdir -p of each DIR; prints nothing.
import java.io.FileInputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.security.MessageDigest;
import java.util.HexFormat;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

public class HdfsBench {
  static final int BUF = 1 << 20;

  static String secs(long ns) {
    return String.format("%.6f", ns / 1e9);
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 2) {
      System.err.println("usage: HdfsBench read PATH... | write DIR LOCAL... | check PATH...");
      System.exit(2);
    }
    long t0 = System.nanoTime();
    FileSystem fs = FileSystem.get(new Configuration());
    long t1 = System.nanoTime();
    byte[] buf = new byte[BUF];
    long n = 0;
    switch (args[0]) {
      case "read": {
        for (int i = 1; i < args.length; i++) {
          try (FSDataInputStream in = fs.open(new Path(args[i]))) {
            int r;
            while ((r = in.read(buf, 0, BUF)) > 0) n += r;
          }
        }
        long t2 = System.nanoTime();
        System.out.println("bytes=" + n + " setup_s=" + secs(t1 - t0) + " read_s=" + secs(t2 - t1));
        break;
      }
      case "write": {
        Path dir = new Path(args[1]);
        for (int i = 2; i < args.length; i++) {
          String local = args[i];
          String name = local.substring(local.lastIndexOf('/') + 1);
          try (InputStream in = new FileInputStream(local);
              OutputStream out = fs.create(new Path(dir, name), true)) {
            int r;
            while ((r = in.read(buf, 0, BUF)) > 0) {
              out.write(buf, 0, r);
              n += r;
            }
          }
        }
        long t2 = System.nanoTime();
        System.out.println("bytes=" + n + " setup_s=" + secs(t1 - t0) + " write_s=" + secs(t2 - t1));
        break;
      }
      case "check": {
        for (int i = 1; i < args.length; i++) {
          Path p = new Path(args[i]);
          FileStatus st = fs.getFileStatus(p);
          MessageDigest md = MessageDigest.getInstance("SHA-256");
          try (FSDataInputStream in = fs.open(p)) {
            int r;
            while ((r = in.read(buf, 0, BUF)) > 0) md.update(buf, 0, r);
          }
          System.out.println(args[i] + " len=" + st.getLen() + " replication=" + st.getReplication()
              + " sha256=" + HexFormat.of().formatHex(md.digest()));
        }
        break;
      }
      case "mkdir": {
        for (int i = 1; i < args.length; i++) fs.mkdirs(new Path(args[i]));
        break;
      }
      default:
        System.err.println("HdfsBench: unknown verb " + args[0]);
        System.exit(2);
    }
    fs.close();
  }
}
