// KahaPairs runs ActiveMQ KahaDB's queue message store in the shape of kdb's
// BenchmarkBroker: each of P producer threads sends a 1 KiB persistent
// message to one queue and then acks it, in a loop. With acks=sync the send
// and the ack are each written with a disk sync before they return (a
// message and an ack whose response is required, as a broker stores them
// for a persistent send and a client ack); with acks=async the ack is
// journaled without a sync of its own (KahaDB's default for acks, made
// durable by a later synced write).
//
// Usage: java -cp CLASSPATH KahaPairs DIR PRODUCERS PAIRS sync|async WARMUP
//
// WARMUP pairs run first, untimed (the JIT's warm-up), then PAIRS timed;
// the last line printed is "pairs=N seconds=S pairs/s=R".
import java.io.File;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.activemq.broker.ConnectionContext;
import org.apache.activemq.command.ActiveMQBytesMessage;
import org.apache.activemq.command.ActiveMQQueue;
import org.apache.activemq.command.MessageAck;
import org.apache.activemq.command.MessageId;
import org.apache.activemq.command.ProducerId;
import org.apache.activemq.store.MessageStore;
import org.apache.activemq.store.kahadb.KahaDBPersistenceAdapter;
import org.apache.activemq.util.ByteSequence;

public class KahaPairs {
    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: KahaPairs DIR PRODUCERS PAIRS sync|async WARMUP");
            System.exit(2);
        }
        File dir = new File(args[0]);
        int producers = Integer.parseInt(args[1]);
        long pairs = Long.parseLong(args[2]);
        boolean syncAcks;
        switch (args[3]) {
            case "sync": syncAcks = true; break;
            case "async": syncAcks = false; break;
            default: throw new IllegalArgumentException("acks: " + args[3]);
        }
        long warmup = Long.parseLong(args[4]);
        if (producers < 1 || pairs < 1 || warmup < 0) {
            System.err.println("KahaPairs: want PRODUCERS >= 1, PAIRS >= 1, WARMUP >= 0");
            System.exit(2);
        }

        KahaDBPersistenceAdapter a = new KahaDBPersistenceAdapter();
        a.setDirectory(dir);
        a.setJournalDiskSyncStrategy("always");
        a.start();
        ActiveMQQueue q = new ActiveMQQueue("q");
        MessageStore store = a.createQueueMessageStore(q);
        store.start();

        run(store, q, producers, warmup, syncAcks, 0);
        long t0 = System.nanoTime();
        run(store, q, producers, pairs, syncAcks, 1);
        double secs = (System.nanoTime() - t0) / 1e9;
        // Every message sent was acked: the queue is empty.
        int left = store.getMessageCount();
        if (left != 0) {
            System.err.println("KahaPairs: " + left + " messages left in the queue");
            System.exit(1);
        }
        store.stop();
        a.stop();
        System.out.printf("pairs=%d seconds=%.6f pairs/s=%.1f%n", pairs, secs, pairs / secs);
    }

    static void run(MessageStore store, ActiveMQQueue q, int producers, long pairs, boolean syncAcks, int phase) throws Exception {
        AtomicLong next = new AtomicLong();
        AtomicReference<Throwable> failed = new AtomicReference<>();
        CountDownLatch done = new CountDownLatch(producers);
        byte[] body = new byte[1024];
        for (int p = 0; p < producers; p++) {
            final ProducerId pid = new ProducerId("ID:kahapairs-" + phase + ":" + p + ":1:1");
            new Thread(() -> {
                try {
                    ConnectionContext ctx = new ConnectionContext();
                    long seq = 0;
                    while (next.incrementAndGet() <= pairs) {
                        seq++;
                        ActiveMQBytesMessage m = new ActiveMQBytesMessage();
                        m.setMessageId(new MessageId(pid, seq));
                        m.setProducerId(pid);
                        m.setDestination(q);
                        m.setPersistent(true);
                        m.setResponseRequired(true);
                        m.setContent(new ByteSequence(body));
                        store.addMessage(ctx, m);
                        MessageAck ack = new MessageAck();
                        ack.setAckType(MessageAck.STANDARD_ACK_TYPE);
                        ack.setDestination(q);
                        ack.setFirstMessageId(m.getMessageId());
                        ack.setLastMessageId(m.getMessageId());
                        ack.setMessageCount(1);
                        ack.setResponseRequired(syncAcks);
                        store.removeMessage(ctx, ack);
                    }
                } catch (Throwable t) {
                    failed.compareAndSet(null, t);
                } finally {
                    done.countDown();
                }
            }).start();
        }
        done.await();
        if (failed.get() != null) {
            throw new RuntimeException("a producer failed", failed.get());
        }
    }
}
