package org.rmqtool.oracle;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;

import java.io.BufferedReader;
import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintStream;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * Command line of the broker oracle (see tests/oracle/README.md).
 *
 * Verbs: write, view, time, batch (and the internal write-child used by kill-mode writes).
 * Exit codes: 0 done, 2 usage error (unknown verb, option or MessageStoreConfig setting),
 * 3 the job failed (exception, timeout); the one-line reason is on stderr.
 */
public final class Main {

    /** The real stdout; System.out is pointed at stderr so that RocketMQ's logging never mixes with JSON. */
    static PrintStream realOut;

    public static void main(String[] args) {
        realOut = new PrintStream(new FileOutputStream(java.io.FileDescriptor.out), true);
        System.setOut(System.err);
        int rc;
        try {
            rc = run(args);
        } catch (UsageError e) {
            System.err.println("rocketmq-oracle: " + e.getMessage());
            rc = 2;
        } catch (Throwable e) {
            System.err.println("rocketmq-oracle: " + describe(e));
            rc = 3;
        }
        realOut.flush();
        System.err.flush();
        Runtime.getRuntime().halt(rc);
    }

    static String describe(Throwable e) {
        Throwable t = e;
        while (t.getCause() != null && (t instanceof java.lang.reflect.InvocationTargetException
            || t instanceof java.util.concurrent.ExecutionException)) {
            t = t.getCause();
        }
        StackTraceElement[] st = t.getStackTrace();
        String where = st.length > 0 ? " at " + st[0] : "";
        return t.getClass().getName() + ": " + t.getMessage() + where;
    }

    static final class UsageError extends RuntimeException {
        UsageError(String m) {
            super(m);
        }
    }

    static final class Args {
        String verb;
        String version;
        String scenario;
        String out;
        String config;
        String store;
        String queryKeys;
        String jobs;
        boolean noCopy;
        int parallel = 1;
        long timeoutMs = 120_000;
        String javaCmd;
        int warmup = 1;
        int repeats = 3;
        boolean reput;
        boolean link;
    }

    static Args parse(String[] a) {
        if (a.length == 0) {
            throw new UsageError("usage: rocketmq-oracle {versions|write|view|batch} ...");
        }
        Args r = new Args();
        r.verb = a[0];
        for (int i = 1; i < a.length; i++) {
            String s = a[i];
            switch (s) {
                case "--version": r.version = need(a, ++i, s); break;
                case "--scenario": r.scenario = need(a, ++i, s); break;
                case "--out": r.out = need(a, ++i, s); break;
                case "--config": r.config = need(a, ++i, s); break;
                case "--query-keys": r.queryKeys = need(a, ++i, s); break;
                case "--no-copy": r.noCopy = true; break;
                case "--parallel": r.parallel = Integer.parseInt(need(a, ++i, s)); break;
                case "--timeout": r.timeoutMs = (long) (Double.parseDouble(need(a, ++i, s)) * 1000); break;
                case "--warmup": r.warmup = Integer.parseInt(need(a, ++i, s)); break;
                case "--repeats": r.repeats = Integer.parseInt(need(a, ++i, s)); break;
                case "--reput": r.reput = true; break;
                case "--link": r.link = true; break;
                default:
                    if (s.startsWith("--")) {
                        throw new UsageError("unknown option " + s);
                    }
                    if ((r.verb.equals("view") || r.verb.equals("time")) && r.store == null) {
                        r.store = s;
                    } else if (r.verb.equals("batch") && r.jobs == null) {
                        r.jobs = s;
                    } else {
                        throw new UsageError("unexpected argument " + s);
                    }
            }
        }
        if (r.version == null) {
            throw new UsageError("--version is required");
        }
        return r;
    }

    static String need(String[] a, int i, String opt) {
        if (i >= a.length) {
            throw new UsageError(opt + " needs a value");
        }
        return a[i];
    }

    static int run(String[] argv) throws Exception {
        if (argv.length > 0 && Ha.VERBS.contains(argv[0])) {
            return Ha.run(argv);   // replicas (issue 38): their own options
        }
        Args a = parse(argv);
        Store.checkVersion(a.version);
        switch (a.verb) {
            case "write": {
                if (a.scenario == null || a.out == null) {
                    throw new UsageError("write needs --scenario S.json --out DIR");
                }
                JsonObject scen = readJson(a.scenario).getAsJsonObject();
                Put.write(a.version, scen, Paths.get(a.out), a.timeoutMs);
                return 0;
            }
            case "write-child": {
                Put.child(a.version, readJson(a.scenario).getAsJsonObject(), Paths.get(a.out));
                return 0;
            }
            case "view": {
                if (a.store == null) {
                    throw new UsageError("view needs STORE");
                }
                JsonObject cfg = a.config == null ? new JsonObject() : readJson(a.config).getAsJsonObject();
                JsonArray keys = a.queryKeys == null ? null : readJson(a.queryKeys).getAsJsonArray();
                JsonObject v = Viewer.view(a.version, cfg, Paths.get(a.store), !a.noCopy, keys, a.timeoutMs);
                Json.print(realOut, v);
                return 0;
            }
            case "time": {
                if (a.store == null) {
                    throw new UsageError("time needs STORE");
                }
                JsonObject cfg = a.config == null ? new JsonObject() : readJson(a.config).getAsJsonObject();
                Json.print(realOut, Timer.time(a.version, cfg, Paths.get(a.store), a.warmup, a.repeats, a.reput, a.link,
                    a.timeoutMs));
                return 0;
            }
            case "batch":
                if (a.jobs == null) {
                    throw new UsageError("batch needs JOBS.jsonl (or - for stdin)");
                }
                return batch(a);
            default:
                throw new UsageError("unknown verb " + a.verb);
        }
    }

    static JsonElement readJson(String path) throws IOException {
        try {
            return JsonParser.parseString(new String(Files.readAllBytes(Paths.get(path)), StandardCharsets.UTF_8));
        } catch (com.google.gson.JsonParseException e) {
            throw new UsageError(path + ": not JSON: " + e.getMessage());
        }
    }

    /** One JSON object per line in, one JSON object per line out (in input order). */
    static int batch(Args a) throws Exception {
        List<String> lines = new ArrayList<>();
        BufferedReader br = a.jobs.equals("-")
            ? new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))
            : Files.newBufferedReader(Paths.get(a.jobs), StandardCharsets.UTF_8);
        for (String l; (l = br.readLine()) != null; ) {
            if (!l.trim().isEmpty()) {
                lines.add(l);
            }
        }
        ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, a.parallel));
        List<Future<JsonObject>> fs = new ArrayList<>();
        for (int i = 0; i < lines.size(); i++) {
            final int n = i;
            final String line = lines.get(i);
            fs.add(pool.submit(() -> runJob(a.version, n, line, a.timeoutMs)));
        }
        int worst = 0;
        for (Future<JsonObject> f : fs) {
            JsonObject r = f.get();
            worst = Math.max(worst, r.get("exit").getAsInt());
            Json.printLine(realOut, r);
        }
        pool.shutdown();
        return worst == 0 ? 0 : 3;
    }

    static JsonObject runJob(String version, int n, String line, long timeoutMs) {
        JsonObject out = new JsonObject();
        out.addProperty("line", n);
        long t0 = System.nanoTime();
        try {
            JsonObject job = JsonParser.parseString(line).getAsJsonObject();
            if (job.has("id")) {
                out.add("id", job.get("id"));
            }
            String verb = job.get("verb").getAsString();
            if (job.has("version") && !job.get("version").getAsString().equals(version)) {
                throw new UsageError("job version " + job.get("version").getAsString()
                    + " differs from the batch's --version " + version);
            }
            JsonObject result;
            if (verb.equals("write")) {
                JsonObject scen = job.get("scenario").isJsonObject() ? job.getAsJsonObject("scenario")
                    : readJson(job.get("scenario").getAsString()).getAsJsonObject();
                result = Put.write(version, scen, Paths.get(job.get("out").getAsString()), timeoutMs);
            } else if (verb.equals("view")) {
                JsonObject cfg = new JsonObject();
                if (job.has("config")) {
                    cfg = job.get("config").isJsonObject() ? job.getAsJsonObject("config")
                        : readJson(job.get("config").getAsString()).getAsJsonObject();
                }
                JsonArray keys = null;
                if (job.has("query_keys")) {
                    keys = job.get("query_keys").isJsonArray() ? job.getAsJsonArray("query_keys")
                        : readJson(job.get("query_keys").getAsString()).getAsJsonArray();
                }
                boolean copy = !(job.has("no_copy") && job.get("no_copy").getAsBoolean());
                result = Viewer.view(version, cfg, Paths.get(job.get("store").getAsString()), copy, keys, timeoutMs);
            } else {
                throw new UsageError("unknown job verb " + verb);
            }
            if (job.has("view_out") || job.has("result_out")) {
                String p = job.has("view_out") ? job.get("view_out").getAsString() : job.get("result_out").getAsString();
                try (Writer w = new OutputStreamWriter(new FileOutputStream(p), StandardCharsets.UTF_8)) {
                    Json.write(w, result, true);
                }
                out.addProperty("written_to", p);
            } else {
                out.add("result", result);
            }
            out.addProperty("exit", 0);
        } catch (UsageError e) {
            out.addProperty("exit", 2);
            out.addProperty("error", e.getMessage());
        } catch (Throwable e) {
            out.addProperty("exit", 3);
            out.addProperty("error", describe(e));
        }
        out.addProperty("elapsed_ms", (System.nanoTime() - t0) / 1e6);
        return out;
    }

    static void deleteTree(Path p) {
        File f = p.toFile();
        if (!f.exists()) {
            return;
        }
        File[] kids = f.listFiles();
        if (kids != null && !Files.isSymbolicLink(p)) {
            for (File k : kids) {
                deleteTree(k.toPath());
            }
        }
        f.delete();
    }
}
