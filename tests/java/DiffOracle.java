// The Java side of tests/test_differential.py: Iceberg 1.9's own parsers and builders, driven line by
// line over stdin/stdout (one JSON request in, one JSON answer out), so a whole commit costs one pipe
// round trip instead of dozens of py4j calls. Run with the single-file source launcher:
//   java -cp <iceberg-spark-runtime.jar>:<pyspark/jars/*> tests/java/DiffOracle.java
// It does what the REST reference server (CatalogHandlers) does with an updateTable / create / view
// commit request, without a catalog: requirements first, then the updates on TableMetadata.buildFrom,
// build(), and TableMetadataParser.toJson of the result. For tests/test_planning_java.py it also plans
// a scan as a Java client plans it itself (TableScan / IncrementalAppendScan.planFiles over the table's
// files on local disk, read through a read-only FileIO of its own).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;
import java.util.Optional;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.io.UncheckedIOException;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.FileScanTask;
import org.apache.iceberg.IncrementalAppendScan;
import org.apache.iceberg.MetadataUpdate;
import org.apache.iceberg.Scan;
import org.apache.iceberg.StaticTableOperations;
import org.apache.iceberg.Table;
import org.apache.iceberg.expressions.Expression;
import org.apache.iceberg.expressions.ExpressionParser;
import org.apache.iceberg.expressions.Expressions;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.InputFile;
import org.apache.iceberg.io.OutputFile;
import org.apache.iceberg.io.SeekableInputStream;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.PartitionSpecParser;
import org.apache.iceberg.Schema;
import org.apache.iceberg.SchemaParser;
import org.apache.iceberg.SortOrder;
import org.apache.iceberg.SortOrderParser;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableMetadataParser;
import org.apache.iceberg.UpdateRequirement;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.rest.requests.UpdateTableRequest;
import org.apache.iceberg.rest.requests.UpdateTableRequestParser;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.JsonNode;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.iceberg.util.JsonUtil;
import org.apache.iceberg.view.ViewMetadata;
import org.apache.iceberg.view.ViewMetadataParser;
import org.apache.iceberg.view.ViewVersionParser;

public class DiffOracle {
  private static final ObjectMapper MAPPER = JsonUtil.mapper();

  public static void main(String[] args) throws Exception {
    PrintStream out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false, "UTF-8");
    System.setOut(System.err); // nothing but answers on the real stdout
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      ObjectNode answer = MAPPER.createObjectNode();
      try {
        JsonNode request = MAPPER.readTree(line);
        handle(request, answer);
      } catch (Throwable t) {
        answer.put("status", 500);
        answer.put("error", "oracle: " + t);
      }
      out.println(MAPPER.writeValueAsString(answer));
      out.flush();
    }
  }

  private static String text(JsonNode node, String field) {
    JsonNode value = node.get(field);
    return value == null || value.isNull() ? null : value.asText();
  }

  private static void handle(JsonNode request, ObjectNode answer) throws Exception {
    String op = request.get("op").asText();
    answer.put("status", 200);
    try {
      switch (op) {
        case "table":
          answer.set("result", table(request, answer));
          break;
        case "view":
          answer.set("result", view(request, answer));
          break;
        case "new_table":
          answer.set("result", newTable(request));
          break;
        case "new_view":
          answer.set("result", newView(request));
          break;
        case "plan":
          answer.set("tasks", plan(request));
          break;
        case "read": // can Java read this metadata back? (status 400 and why, if not)
          String json = MAPPER.writeValueAsString(request.get("metadata"));
          if (request.get("metadata").has("view-uuid")) {
            ViewMetadataParser.fromJson(json);
          } else {
            TableMetadataParser.fromJson(json);
          }
          break;
        default:
          throw new IllegalStateException("unknown op " + op);
      }
    } catch (CommitFailedException e) {
      answer.put("status", 409);
      answer.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
    } catch (RuntimeException e) {
      answer.put("status", 400);
      answer.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
      StringBuilder where = new StringBuilder(); // the innermost Iceberg frames, for reading a disagreement
      int n = 0;
      for (StackTraceElement frame : e.getStackTrace()) {
        if (frame.getClassName().startsWith("org.apache.iceberg") && n++ < 4) {
          where.append(frame.getClassName().replace("org.apache.iceberg.", "")).append('.')
              .append(frame.getMethodName()).append(':').append(frame.getLineNumber()).append(' ');
        }
      }
      answer.put("where", where.toString().trim());
    }
    // can Java read what our engine wrote? (its re-serialisation, for the diff)
    JsonNode ours = request.get("ours");
    if (ours != null && !ours.isNull()) {
      try {
        String json = MAPPER.writeValueAsString(ours);
        String again =
            op.equals("table") || op.equals("new_table")
                ? TableMetadataParser.toJson(TableMetadataParser.fromJson(json))
                : ViewMetadataParser.toJson(ViewMetadataParser.fromJson(json));
        answer.set("ours_reparsed", MAPPER.readTree(again));
      } catch (RuntimeException e) {
        answer.put("ours_error", e.getClass().getSimpleName() + ": " + e.getMessage());
      }
    }
  }

  private static UpdateTableRequest parseRequest(JsonNode request) {
    ObjectNode body = MAPPER.createObjectNode();
    body.set("requirements", request.get("requirements"));
    body.set("updates", request.get("updates"));
    return UpdateTableRequestParser.fromJson(body);
  }

  // CatalogHandlers.updateTable: isCreate -> create(ops, request), else commit(ops, request)
  private static JsonNode table(JsonNode request, ObjectNode answer) throws Exception {
    UpdateTableRequest parsed = parseRequest(request);
    JsonNode baseNode = request.get("base");
    TableMetadata base =
        baseNode == null || baseNode.isNull()
            ? null
            : TableMetadataParser.fromJson(text(request, "base_location"), baseNode);
    boolean isCreate =
        parsed.requirements().stream().anyMatch(UpdateRequirement.AssertTableDoesNotExist.class::isInstance);
    TableMetadata updated;
    if (isCreate) {
      for (UpdateRequirement r : parsed.requirements()) {
        if (!(r instanceof UpdateRequirement.AssertTableDoesNotExist)) {
          throw new IllegalArgumentException("Invalid create requirements: " + r);
        }
      }
      for (UpdateRequirement r : parsed.requirements()) {
        r.validate(base);
      }
      Optional<Integer> formatVersion =
          parsed.updates().stream()
              .filter(u -> u instanceof MetadataUpdate.UpgradeFormatVersion)
              .map(u -> ((MetadataUpdate.UpgradeFormatVersion) u).formatVersion())
              .findFirst();
      TableMetadata.Builder builder =
          formatVersion.map(TableMetadata::buildFromEmpty).orElseGet(TableMetadata::buildFromEmpty);
      for (MetadataUpdate u : parsed.updates()) {
        u.applyTo(builder);
      }
      updated = builder.build();
    } else {
      if (base == null) {
        throw new IllegalStateException("oracle: a commit without assert-create needs a base");
      }
      for (UpdateRequirement r : parsed.requirements()) {
        r.validate(base);
      }
      TableMetadata.Builder builder = TableMetadata.buildFrom(base);
      for (MetadataUpdate u : parsed.updates()) {
        u.applyTo(builder);
      }
      updated = builder.build();
      if (updated.changes().isEmpty()) {
        answer.put("changed", false);
        return baseNode;
      }
    }
    answer.put("changed", true);
    return MAPPER.readTree(TableMetadataParser.toJson(updated));
  }

  // CatalogHandlers.commit(ViewOperations, request)
  private static JsonNode view(JsonNode request, ObjectNode answer) throws Exception {
    UpdateTableRequest parsed = parseRequest(request);
    JsonNode baseNode = request.get("base");
    ViewMetadata base = ViewMetadataParser.fromJson(text(request, "base_location"), baseNode);
    for (UpdateRequirement r : parsed.requirements()) {
      r.validate(base);
    }
    ViewMetadata.Builder builder = ViewMetadata.buildFrom(base);
    for (MetadataUpdate u : parsed.updates()) {
      u.applyTo(builder);
    }
    ViewMetadata updated = builder.build();
    if (updated.changes().isEmpty()) {
      answer.put("changed", false);
      return baseNode;
    }
    answer.put("changed", true);
    return MAPPER.readTree(ViewMetadataParser.toJson(updated));
  }

  private static Map<String, String> properties(JsonNode request) {
    Map<String, String> props = new HashMap<>();
    JsonNode node = request.get("properties");
    if (node != null && !node.isNull()) {
      Iterator<Map.Entry<String, JsonNode>> it = node.fields();
      while (it.hasNext()) {
        Map.Entry<String, JsonNode> e = it.next();
        props.put(e.getKey(), e.getValue().asText());
      }
    }
    return props;
  }

  // CatalogHandlers.createTable -> catalog.buildTable(...).create() -> TableMetadata.newTableMetadata,
  // with the request parsed the way CreateTableRequest binds it (unbound spec/order bound to the schema)
  private static JsonNode newTable(JsonNode request) throws Exception {
    Schema schema = SchemaParser.fromJson(request.get("schema"));
    JsonNode specNode = request.get("spec");
    JsonNode orderNode = request.get("order");
    PartitionSpec spec =
        specNode == null || specNode.isNull()
            ? PartitionSpec.unpartitioned()
            : PartitionSpecParser.fromJson(specNode).bind(schema);
    SortOrder order =
        orderNode == null || orderNode.isNull()
            ? SortOrder.unsorted()
            : SortOrderParser.fromJson(orderNode).bind(schema);
    TableMetadata metadata =
        TableMetadata.newTableMetadata(schema, spec, order, text(request, "location"), properties(request));
    return MAPPER.readTree(TableMetadataParser.toJson(metadata));
  }

  // ViewMetadata.builder() as BaseMetastoreViewCatalog's create() uses it, with the request's version
  private static JsonNode newView(JsonNode request) throws Exception {
    Schema schema = SchemaParser.fromJson(request.get("schema"));
    ViewMetadata metadata =
        ViewMetadata.builder()
            .setProperties(properties(request))
            .setLocation(text(request, "location"))
            .setCurrentVersion(ViewVersionParser.fromJson(request.get("version")), schema)
            .build();
    return MAPPER.readTree(ViewMetadataParser.toJson(metadata));
  }

  // A scan planned as Java plans it itself: {"metadata-location", "snapshot-id"?, "start-snapshot-id"?,
  // "end-snapshot-id"?, "filter"? (the REST spec's expression JSON), "case-sensitive"?} -> the tasks as
  // [data file, [its delete files, sorted]], sorted. An end snapshot makes it an incremental append scan
  // (the start exclusive), as the REST spec's planTableScan defines one.
  private static JsonNode plan(JsonNode request) throws IOException {
    String location = text(request, "metadata-location");
    Table table = TABLES.computeIfAbsent(location, l -> new BaseTable(new StaticTableOperations(l, IO), "oracle"));
    JsonNode filterNode = request.get("filter");
    Expression filter =
        filterNode == null || filterNode.isNull()
            ? Expressions.alwaysTrue()
            : ExpressionParser.fromJson(MAPPER.writeValueAsString(filterNode));
    boolean caseSensitive = !request.has("case-sensitive") || request.get("case-sensitive").asBoolean();
    Scan<?, FileScanTask, ?> scan;
    if (request.hasNonNull("end-snapshot-id")) {
      IncrementalAppendScan incremental =
          table.newIncrementalAppendScan().toSnapshot(request.get("end-snapshot-id").asLong());
      if (request.hasNonNull("start-snapshot-id")) {
        incremental = incremental.fromSnapshotExclusive(request.get("start-snapshot-id").asLong());
      }
      scan = incremental.filter(filter).caseSensitive(caseSensitive);
    } else if (request.hasNonNull("snapshot-id")) {
      scan = table.newScan().useSnapshot(request.get("snapshot-id").asLong()).filter(filter).caseSensitive(caseSensitive);
    } else {
      scan = table.newScan().filter(filter).caseSensitive(caseSensitive);
    }
    List<String> rows = new ArrayList<>();
    List<ArrayNode> tasks = new ArrayList<>();
    try (CloseableIterable<FileScanTask> planned = scan.planFiles()) {
      for (FileScanTask task : planned) {
        ArrayNode pair = MAPPER.createArrayNode();
        pair.add(task.file().path().toString());
        List<String> deletes = new ArrayList<>();
        for (DeleteFile d : task.deletes()) {
          deletes.add(d.path().toString());
        }
        Collections.sort(deletes);
        ArrayNode deleteNodes = pair.addArray();
        deletes.forEach(deleteNodes::add);
        tasks.add(pair);
      }
    }
    tasks.sort((a, b) -> a.toString().compareTo(b.toString()));
    ArrayNode out = MAPPER.createArrayNode();
    tasks.forEach(out::add);
    return out;
  }

  // The tables planned lately, by metadata file (it never changes), and one FileIO for all: Java's own
  // manifest content cache (io.manifest.cache-enabled) keeps the manifests' bytes across plans.
  private static final FileIO IO = new LocalIO();
  private static final Map<String, Table> TABLES =
      new java.util.LinkedHashMap<String, Table>(64, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, Table> eldest) {
          return size() > 64;
        }
      };

  private static Path local(String location) {
    return location.startsWith("file:") ? Paths.get(URI.create(location)) : Paths.get(location);
  }

  // Reads local files only: the oracle plans, it never writes or deletes.
  static final class LocalIO implements FileIO {
    @Override
    public InputFile newInputFile(String location) {
      return new LocalInput(location);
    }

    @Override
    public OutputFile newOutputFile(String location) {
      throw new UnsupportedOperationException("the oracle does not write");
    }

    @Override
    public void deleteFile(String location) {
      throw new UnsupportedOperationException("the oracle does not delete");
    }

    @Override
    public Map<String, String> properties() {
      return Map.of("io.manifest.cache-enabled", "true");
    }
  }

  static final class LocalInput implements InputFile {
    private final String location;

    LocalInput(String location) {
      this.location = location;
    }

    @Override
    public long getLength() {
      try {
        return Files.size(local(location));
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }

    @Override
    public SeekableInputStream newStream() {
      try {
        RandomAccessFile file = new RandomAccessFile(local(location).toFile(), "r");
        return new SeekableInputStream() {
          @Override
          public long getPos() throws IOException {
            return file.getFilePointer();
          }

          @Override
          public void seek(long pos) throws IOException {
            file.seek(pos);
          }

          @Override
          public int read() throws IOException {
            return file.read();
          }

          @Override
          public int read(byte[] b, int off, int len) throws IOException {
            return file.read(b, off, len);
          }

          @Override
          public void close() throws IOException {
            file.close();
          }
        };
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }

    @Override
    public String location() {
      return location;
    }

    @Override
    public boolean exists() {
      return Files.exists(local(location));
    }
  }
}
