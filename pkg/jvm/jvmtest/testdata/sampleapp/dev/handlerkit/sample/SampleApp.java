package dev.handlerkit.sample;

import java.lang.management.ManagementFactory;
import java.util.concurrent.atomic.AtomicLong;

import javax.management.MBeanServer;
import javax.management.ObjectName;

/**
 * A small long-running JVM application for tests and demo images. It registers two MBeans whose values change over
 * time, prints a ready line, then runs until killed.
 */
public final class SampleApp {
    private SampleApp() {
    }

    /** Standard MBean interface of the request counter. */
    public interface CounterMBean {
        long getCount();
    }

    /** Standard MBean interface of the queue-depth gauge. */
    public interface GaugeMBean {
        double getValue();
    }

    /** A counter that only grows. */
    public static final class Counter implements CounterMBean {
        private final AtomicLong count = new AtomicLong();

        void increment() {
            count.incrementAndGet();
        }

        @Override
        public long getCount() {
            return count.get();
        }
    }

    /** A gauge that goes up and down with time. */
    public static final class Gauge implements GaugeMBean {
        private final long start = System.nanoTime();

        @Override
        public double getValue() {
            double seconds = (System.nanoTime() - start) / 1e9;
            return 50 + 50 * Math.sin(seconds / 5);
        }
    }

    public static void main(String[] args) throws Exception {
        MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        Counter counter = new Counter();
        server.registerMBean(counter, new ObjectName("dev.handlerkit.sample:type=Counter"));
        server.registerMBean(new Gauge(), new ObjectName("dev.handlerkit.sample:type=Gauge"));
        System.out.println("handlerkit sample app ready");
        System.out.flush();
        while (true) {
            counter.increment();
            Thread.sleep(100);
        }
    }
}
