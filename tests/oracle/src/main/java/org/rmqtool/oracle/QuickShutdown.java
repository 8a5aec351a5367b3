package org.rmqtool.oracle;

/**
 * DefaultMessageStore.shutdown() without its fixed pause. Every release sleeps there before it
 * stops its services (4.x: 1 s, 5.x: 3 s, after waiting for its scheduled executors) so that puts
 * still in flight can finish. The harness calls shutdown() only when nothing is in flight (the
 * reput has caught up, no writer runs), so the pause changes nothing but the time: a watcher
 * thread interrupts the calling thread once, while it sits in that Thread.sleep called from
 * DefaultMessageStore.shutdown (RocketMQ catches the InterruptedException, logs it and goes on
 * with the rest of shutdown(), which then runs exactly as before). Nothing else is interrupted:
 * the watcher looks at the caller's stack every 2 ms and fires only on that frame, early in the
 * sleep. ROCKETMQ_ORACLE_SLOW_SHUTDOWN=1 keeps the pause.
 *
 * <p>One thing may still run then: IndexService starts a FlushIndexFileThread for each index
 * file that fills up, which sets the checkpoint's indexMsgTimestamp and flushes it. The pause
 * lets it finish before shutdown() writes the checkpoint, so the quick shutdown first waits for
 * those threads. (Two of them started together still race each other: that is RocketMQ's.)
 */
final class QuickShutdown {
    private QuickShutdown() {
    }

    /** Waits (at most 10 s each) for every FlushIndexFileThread still running. */
    static void awaitIndexFlushes() {
        for (Thread t : Thread.getAllStackTraces().keySet()) {
            if ("FlushIndexFileThread".equals(t.getName())) {
                try {
                    t.join(10_000);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return;
                }
            }
        }
    }

    static void run(Runnable shutdown) {
        if (System.getenv("ROCKETMQ_ORACLE_SLOW_SHUTDOWN") != null) {
            shutdown.run();
            return;
        }
        awaitIndexFlushes();
        final Thread caller = Thread.currentThread();
        final Object lock = new Object();
        final boolean[] over = {false};
        Thread watcher = new Thread(() -> {
            while (true) {
                StackTraceElement[] st = caller.getStackTrace();
                if (st.length >= 2 && "java.lang.Thread".equals(st[0].getClassName()) && "sleep".equals(st[0].getMethodName())
                    && st[1].getClassName().endsWith(".DefaultMessageStore") && "shutdown".equals(st[1].getMethodName())) {
                    synchronized (lock) {
                        if (!over[0]) {
                            caller.interrupt();
                        }
                    }
                    return;
                }
                synchronized (lock) {
                    if (over[0]) {
                        return;
                    }
                    try {
                        lock.wait(2);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            }
        }, "oracle-quick-shutdown");
        watcher.setDaemon(true);
        watcher.start();
        try {
            shutdown.run();
        } finally {
            synchronized (lock) {
                over[0] = true;
                lock.notifyAll();
            }
            try {
                watcher.join();
            } catch (InterruptedException ignored) {
                // the flag is cleared below either way
            }
            Thread.interrupted(); // an interrupt that arrived after RocketMQ's sleep must not leak into the next job
        }
    }
}
