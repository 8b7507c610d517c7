// ProtoDump: writes the .proto definitions that Hadoop's jars carry
// compiled into their generated classes (every protoc-generated Java
// class holds its file's FileDescriptorProto) back out as .proto text,
// with the files they import. Hadoop publishes no .proto file in its
// Maven artifacts, not even in the -sources jars; this gets loom the exact
// messages of the pinned Hadoop version without copying source files.
// Comments of the originals are not in the descriptors.
//
//   java -cp "$(cat hadoop-classpath.txt)" hadoop/ProtoDump.java OUTDIR CLASS...
//   java -cp ... hadoop/ProtoDump.java --verify SET.pb CLASS...
//
// The second form checks the printed files: SET.pb is what protoc makes
// of them (--include_imports --descriptor_set_out), which must equal the
// jars' descriptors but for file options and json_name. (hadoop/protos.sh
// runs both.) Written for proto2 files as Hadoop's are;
// it refuses what it cannot print (groups, extensions) rather than guess.
import java.io.IOException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.thirdparty.protobuf.DescriptorProtos.DescriptorProto;
import org.apache.hadoop.thirdparty.protobuf.DescriptorProtos.EnumDescriptorProto;
import org.apache.hadoop.thirdparty.protobuf.DescriptorProtos.EnumValueDescriptorProto;
import org.apache.hadoop.thirdparty.protobuf.DescriptorProtos.FieldDescriptorProto;
import org.apache.hadoop.thirdparty.protobuf.DescriptorProtos.FileDescriptorProto;
import org.apache.hadoop.thirdparty.protobuf.DescriptorProtos.MethodDescriptorProto;
import org.apache.hadoop.thirdparty.protobuf.DescriptorProtos.ServiceDescriptorProto;
import org.apache.hadoop.thirdparty.protobuf.Descriptors.FileDescriptor;

public class ProtoDump {
  static final String HEADER =
      "/**\n"
          + " * Licensed to the Apache Software Foundation (ASF) under one\n"
          + " * or more contributor license agreements.  See the NOTICE file\n"
          + " * distributed with this work for additional information\n"
          + " * regarding copyright ownership.  The ASF licenses this file\n"
          + " * to you under the Apache License, Version 2.0 (the\n"
          + " * \"License\"); you may not use this file except in compliance\n"
          + " * with the License.  You may obtain a copy of the License at\n"
          + " *\n"
          + " *     http://www.apache.org/licenses/LICENSE-2.0\n"
          + " *\n"
          + " * Unless required by applicable law or agreed to in writing, software\n"
          + " * distributed under the License is distributed on an \"AS IS\" BASIS,\n"
          + " * WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.\n"
          + " * See the License for the specific language governing permissions and\n"
          + " * limitations under the License.\n"
          + " */\n";

  public static void main(String[] args) throws Exception {
    if (args[0].equals("--verify")) {
      System.exit(verify(args));
    }
    Path out = Path.of(args[0]);
    Files.createDirectories(out);
    Map<String, FileDescriptor> files = new LinkedHashMap<>();
    Map<String, String> from = new LinkedHashMap<>();
    for (int i = 1; i < args.length; i++) {
      Class<?> c = Class.forName(args[i]);
      Method m = c.getMethod("getDescriptor");
      collect((FileDescriptor) m.invoke(null), files, from, c);
    }
    for (FileDescriptor fd : files.values()) write(out, fd, from.get(fd.getName()));
  }

  static String comparable(FileDescriptorProto p) {
    return p.toBuilder().clearOptions().build().toString()
        .replaceAll("(?m)^ *json_name: .*\n", "");
  }

  static int verify(String[] args) throws Exception {
    org.apache.hadoop.thirdparty.protobuf.DescriptorProtos.FileDescriptorSet set =
        org.apache.hadoop.thirdparty.protobuf.DescriptorProtos.FileDescriptorSet.parseFrom(
            Files.readAllBytes(Path.of(args[1])));
    Map<String, FileDescriptor> files = new LinkedHashMap<>();
    Map<String, String> from = new LinkedHashMap<>();
    for (int i = 2; i < args.length; i++)
      collect((FileDescriptor) Class.forName(args[i]).getMethod("getDescriptor").invoke(null),
          files, from, Class.forName(args[i]));
    int bad = 0;
    for (FileDescriptorProto p : set.getFileList()) {
      FileDescriptor o = files.get(p.getName());
      boolean same = o != null && comparable(o.toProto()).equals(comparable(p));
      if (!same) {
        System.err.println("ProtoDump: " + p.getName() + " does not match the jar's descriptor");
        bad++;
      }
    }
    if (set.getFileCount() != files.size()) {
      System.err.println("ProtoDump: " + set.getFileCount() + " files printed, " + files.size()
          + " in the jars");
      bad++;
    }
    if (bad == 0) System.err.println("ProtoDump: " + files.size() + " files match the jars' descriptors");
    return bad == 0 ? 0 : 1;
  }

  static void collect(FileDescriptor fd, Map<String, FileDescriptor> files,
      Map<String, String> from, Class<?> via) {
    if (files.containsKey(fd.getName())) return;
    for (FileDescriptor d : fd.getDependencies()) collect(d, files, from, via);
    files.put(fd.getName(), fd);
    String jar = via.getProtectionDomain().getCodeSource().getLocation().getPath();
    from.put(fd.getName(), fd.getOptions().getJavaPackage() + "."
        + fd.getOptions().getJavaOuterClassname() + " in " + Path.of(jar).getFileName());
  }

  static void write(Path out, FileDescriptor fd, String origin) throws IOException {
    FileDescriptorProto p = fd.toProto();
    StringBuilder b = new StringBuilder(HEADER);
    b.append("\n// ").append(p.getName()).append(": extracted by hadoop/ProtoDump.java from the\n")
        .append("// descriptor compiled into ").append(origin.replace(" in ", "\n// in ")).append(".\n")
        .append("// The original's comments are not in the descriptor. Do not edit:\n")
        .append("// regenerate with hadoop/protos.sh.\n\n");
    String syntax = p.getSyntax().isEmpty() ? "proto2" : p.getSyntax();
    b.append("syntax = \"").append(syntax).append("\";\n");
    if (p.hasPackage()) b.append("package ").append(p.getPackage()).append(";\n");
    if (p.getOptions().hasJavaPackage())
      b.append("option java_package = \"").append(p.getOptions().getJavaPackage()).append("\";\n");
    if (p.getOptions().hasJavaOuterClassname())
      b.append("option java_outer_classname = \"").append(p.getOptions().getJavaOuterClassname())
          .append("\";\n");
    if (p.getDependencyCount() > 0) b.append('\n');
    for (String d : p.getDependencyList()) b.append("import \"").append(d).append("\";\n");
    if (p.getExtensionCount() > 0) throw new IllegalStateException(p.getName() + ": extensions");
    for (EnumDescriptorProto e : p.getEnumTypeList()) enumDef(b, e, "");
    for (DescriptorProto m : p.getMessageTypeList()) message(b, m, "");
    for (ServiceDescriptorProto s : p.getServiceList()) {
      b.append("\nservice ").append(s.getName()).append(" {\n");
      for (MethodDescriptorProto m : s.getMethodList())
        b.append("  rpc ").append(m.getName()).append(" (").append(m.getInputType())
            .append(") returns (").append(m.getOutputType()).append(");\n");
      b.append("}\n");
    }
    Files.write(out.resolve(p.getName()), b.toString().getBytes(StandardCharsets.UTF_8));
  }

  static void enumDef(StringBuilder b, EnumDescriptorProto e, String in) {
    b.append('\n').append(in).append("enum ").append(e.getName()).append(" {\n");
    if (e.getOptions().getAllowAlias()) b.append(in).append("  option allow_alias = true;\n");
    for (EnumValueDescriptorProto v : e.getValueList())
      b.append(in).append("  ").append(v.getName()).append(" = ").append(v.getNumber())
          .append(v.getOptions().getDeprecated() ? " [deprecated = true]" : "").append(";\n");
    b.append(in).append("}\n");
  }

  static void message(StringBuilder b, DescriptorProto m, String in) {
    if (m.getExtensionCount() > 0) throw new IllegalStateException(m.getName() + ": extensions");
    b.append('\n').append(in).append("message ").append(m.getName()).append(" {\n");
    String in2 = in + "  ";
    Map<String, DescriptorProto> maps = new LinkedHashMap<>();
    for (DescriptorProto n : m.getNestedTypeList()) {
      if (n.getOptions().getMapEntry()) maps.put(n.getName(), n);
      else message(b, n, in2);
    }
    for (EnumDescriptorProto e : m.getEnumTypeList()) enumDef(b, e, in2);
    List<List<FieldDescriptorProto>> oneofs = new ArrayList<>();
    for (int i = 0; i < m.getOneofDeclCount(); i++) oneofs.add(new ArrayList<>());
    for (FieldDescriptorProto f : m.getFieldList()) {
      if (f.hasOneofIndex() && !f.getProto3Optional()) {
        oneofs.get(f.getOneofIndex()).add(f);
        continue;
      }
      field(b, f, in2, maps, false);
    }
    for (int i = 0; i < oneofs.size(); i++) {
      if (oneofs.get(i).isEmpty()) continue; // a proto3 optional's own
      b.append(in2).append("oneof ").append(m.getOneofDecl(i).getName()).append(" {\n");
      for (FieldDescriptorProto f : oneofs.get(i)) field(b, f, in2 + "  ", maps, true);
      b.append(in2).append("}\n");
    }
    for (DescriptorProto.ReservedRange r : m.getReservedRangeList())
      b.append(in2).append("reserved ").append(r.getStart())
          .append(r.getEnd() - 1 == r.getStart() ? "" : " to " + (r.getEnd() - 1)).append(";\n");
    for (DescriptorProto.ExtensionRange r : m.getExtensionRangeList())
      b.append(in2).append("extensions ").append(r.getStart()).append(" to ")
          .append(r.getEnd() >= 536870912 ? "max" : String.valueOf(r.getEnd() - 1)).append(";\n");
    for (String r : m.getReservedNameList()) b.append(in2).append("reserved \"").append(r).append("\";\n");
    b.append(in).append("}\n");
  }

  static void field(StringBuilder b, FieldDescriptorProto f, String in,
      Map<String, DescriptorProto> maps, boolean inOneof) {
    b.append(in);
    String tn = f.getTypeName();
    String mapName = tn.substring(tn.lastIndexOf('.') + 1);
    if (f.getType() == FieldDescriptorProto.Type.TYPE_MESSAGE && maps.containsKey(mapName)
        && f.getLabel() == FieldDescriptorProto.Label.LABEL_REPEATED) {
      DescriptorProto e = maps.get(mapName);
      b.append("map<").append(type(e.getField(0))).append(", ").append(type(e.getField(1)))
          .append("> ");
    } else {
      if (!inOneof) {
        switch (f.getLabel()) {
          case LABEL_OPTIONAL: b.append("optional "); break;
          case LABEL_REQUIRED: b.append("required "); break;
          case LABEL_REPEATED: b.append("repeated "); break;
        }
      }
      b.append(type(f)).append(' ');
    }
    b.append(f.getName()).append(" = ").append(f.getNumber());
    List<String> opts = new ArrayList<>();
    if (f.hasDefaultValue()) opts.add("default = " + defaultValue(f));
    if (f.getOptions().hasPacked()) opts.add("packed = " + f.getOptions().getPacked());
    if (f.getOptions().getDeprecated()) opts.add("deprecated = true");
    if (!opts.isEmpty()) b.append(" [").append(String.join(", ", opts)).append(']');
    b.append(";\n");
  }

  static String type(FieldDescriptorProto f) {
    switch (f.getType()) {
      case TYPE_MESSAGE: case TYPE_ENUM: return f.getTypeName();
      case TYPE_GROUP: throw new IllegalStateException(f.getName() + ": groups");
      default: return f.getType().name().substring(5).toLowerCase();
    }
  }

  static String defaultValue(FieldDescriptorProto f) {
    String v = f.getDefaultValue();
    switch (f.getType()) {
      case TYPE_STRING: {
        StringBuilder s = new StringBuilder("\"");
        for (byte c : v.getBytes(StandardCharsets.UTF_8)) {
          int u = c & 0xff;
          if (u == '"' || u == '\\') s.append('\\').append((char) u);
          else if (u < 0x20 || u >= 0x7f) s.append(String.format("\\%03o", u));
          else s.append((char) u);
        }
        return s.append('"').toString();
      }
      case TYPE_BYTES: return "\"" + v + "\""; // already C-escaped in the descriptor
      default: return v;
    }
  }
}
