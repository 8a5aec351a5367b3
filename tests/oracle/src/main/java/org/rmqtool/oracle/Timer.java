package org.rmqtool.oracle;

import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.config.MessageStoreConfig;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.stream.Collectors;
import java.util.stream.Stream;

/**
 * The `time` verb: how long the broker's own store code takes on a store, and nothing else (no view
 * is collected, nothing is hashed). Used by bench/bench_vs_broker.py to put rmqtool's figures beside
 * the broker's on the same bytes in the same run.
 *
 * Each run opens a fresh copy of STORE (made beside it, on the same file system, outside the timed
 * part): DefaultMessageStore.load() is timed (its normal recovery, or its abnormal one when the copy
 * has an abort file: whatever the store holds decides, as in a broker); with --reput, start() and the
 * wait until the reput has dispatched up to the commitlog's max offset are timed as well (consume
 * queues and index built from wherever the store's consume queues end: from nothing when they are
 * absent). shutdown() and the deletion of the copy are not timed. The first --warmup runs are made
 * and reported apart (a cold JVM is what a starting broker is; warm runs are the JIT-compiled code).
 * Besides wall times, the JVM process's CPU time over the same spans (all its threads: the reput
 * service, GC, the JIT compiler), the figure to compare on a machine shared with other work.
 *
 * With --link the copy hard-links the commitlog files before the last one instead of copying them
 * (a 5 GiB store is then not written out again before every run, and its dirty pages are not
 * flushed during the next timed run): the broker's recovery cuts or zeroes only the last file and
 * its reput writes consume queues and index, so it only reads them; bench_vs_broker.py checks their
 * size and mtime after every run.
 */
final class Timer {

    static JsonObject time(String version, JsonObject cfg, Path store, int warmup, int repeats, boolean reput,
        boolean link, long timeoutMs) throws Exception {
        if (!Files.isDirectory(store)) {
            throw new Main.UsageError("store " + store + " is not a directory");
        }
        JsonObject out = new JsonObject();
        out.addProperty("rocketmq_version", version);
        out.addProperty("rocketmq_version_from_jar", Store.jarVersion());
        out.addProperty("store", store.toString());
        out.addProperty("abort_file_present", Files.exists(store.resolve("abort")));
        out.addProperty("consumequeue_present", Files.isDirectory(store.resolve("consumequeue")));
        out.addProperty("reput", reput);
        out.addProperty("link", link);
        JsonArray warm = new JsonArray();
        JsonArray runs = new JsonArray();
        for (int i = 0; i < warmup + repeats; i++) {
            JsonObject r = once(version, cfg, store, reput, link, timeoutMs);
            (i < warmup ? warm : runs).add(r);
        }
        out.add("warmup", warm);
        out.add("runs", runs);
        return out;
    }

    static JsonObject once(String version, JsonObject cfg, Path store, boolean reput, boolean link, long timeoutMs)
        throws Exception {
        Path parent = store.toAbsolutePath().getParent();
        Path root = Files.createTempDirectory(parent, "rmq-oracle-time-");
        try {
            if (link) {
                linkTree(store, root);
            } else {
                Viewer.copyTree(store, root);
            }
            return Timeout.run(() -> timed(cfg, root, reput), timeoutMs, "time of " + store);
        } finally {
            Main.deleteTree(root);
        }
    }

    /** A copy of the tree whose commitlog files before the last one (by name) are hard links. */
    static void linkTree(Path from, Path to) throws IOException {
        Set<Path> linked = new HashSet<>();
        Path commitlog = from.resolve("commitlog");
        if (Files.isDirectory(commitlog)) {
            List<Path> files;
            try (Stream<Path> s = Files.list(commitlog)) {
                files = s.filter(Files::isRegularFile).sorted().collect(Collectors.toList());
            }
            linked.addAll(files.subList(0, Math.max(0, files.size() - 1)));
        }
        try (Stream<Path> s = Files.walk(from)) {
            for (Path p : (Iterable<Path>) s::iterator) {
                Path t = to.resolve(from.relativize(p).toString());
                if (Files.isDirectory(p)) {
                    Files.createDirectories(t);
                } else if (linked.contains(p)) {
                    Files.createLink(t, p);
                } else {
                    Files.copy(p, t, StandardCopyOption.REPLACE_EXISTING);
                }
            }
        }
    }

    static long cpuNanos() {
        java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
        if (os instanceof com.sun.management.OperatingSystemMXBean) {
            return ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime();
        }
        return -1;
    }

    static JsonObject timed(JsonObject cfg, Path root, boolean reput) throws Exception {
        JsonObject r = new JsonObject();
        MessageStoreConfig c = Store.config(cfg, root);
        DefaultMessageStore s = Store.open(c, cfg);
        long c0 = cpuNanos();
        long t0 = System.nanoTime();
        boolean ok = s.load();
        long t1 = System.nanoTime();
        long c1 = cpuNanos();
        r.addProperty("load_ok", ok);
        r.addProperty("load_ms", (t1 - t0) / 1e6);
        r.addProperty("load_cpu_ms", (c1 - c0) / 1e6);
        if (!ok) {
            try {
                s.shutdown();
            } catch (Throwable ignored) {
                // load() left half-built services
            }
            return r;
        }
        r.addProperty("commitlog_max_offset", s.getMaxPhyOffset());
        if (reput) {
            Object schedule = Viewer.holdSchedule(s);
            long t2 = System.nanoTime();
            s.start();
            while (s.dispatchBehindBytes() > 0) {
                Thread.sleep(1);
            }
            long t3 = System.nanoTime();
            long c3 = cpuNanos();
            r.addProperty("start_and_reput_ms", (t3 - t2) / 1e6);
            r.addProperty("load_and_reput_ms", (t3 - t0) / 1e6);
            r.addProperty("load_and_reput_cpu_ms", (c3 - c0) / 1e6);
            Viewer.persistSchedule(schedule);
        }
        s.shutdown();
        return r;
    }
}
