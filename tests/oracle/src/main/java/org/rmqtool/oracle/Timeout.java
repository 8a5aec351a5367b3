package org.rmqtool.oracle;

import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.FutureTask;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/** Runs a job in its own daemon thread; a job that hangs (RocketMQ's start() can wait forever for a
 * reput that never progresses) is abandoned and reported. */
final class Timeout {
    static <T> T run(Callable<T> job, long ms, String what) throws Exception {
        FutureTask<T> f = new FutureTask<>(job);
        Thread t = new Thread(f, "oracle-job");
        t.setDaemon(true);
        t.start();
        try {
            return f.get(ms, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            t.interrupt();
            throw new RuntimeException("timeout after " + ms + " ms: " + what + " (RocketMQ did not finish)");
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            if (c instanceof Exception) {
                throw (Exception) c;
            }
            throw new RuntimeException(c);
        }
    }
}
