package io.rayq.spark;

import java.io.IOException;
import java.lang.reflect.Field;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.WritableByteChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * This executor's slots: shared-memory files in which a task hands a put's rows to a
 * broker on its node (actors/server/shared_rows.py). A slot is a file
 * {@code <dir>/rayq-put-<32 hex digits>}, written with zeros when made (so a full
 * tmpfs is an IOException here, never a SIGBUS later) and mapped; it is reused put after
 * put with the same broker, and unlinked once a put through it was answered (the two
 * mappings keep it from then on). Free slots idle for {@code IDLE_NANOS} are dropped
 * and unmapped by a daemon thread.
 * A tmpfs with less than {@code KEEP_FREE} bytes to spare (Ray's object store may live
 * there too) gets no slots: the rows go through Ray.
 */
final class SharedSlots {
  private static final Logger LOG = LoggerFactory.getLogger(SharedSlots.class);
  private static final long IDLE_NANOS = 30_000_000_000L;
  private static final long KEEP_FREE = 2L << 30;
  private static final long MAX_BYTES = 512L << 20; // all slots of this JVM
  private static final int ZEROS = 1 << 20;
  private static final Map<String, ArrayDeque<Slot>> FREE = new HashMap<>(); // by broker
  private static long bytes;
  private static ScheduledExecutorService sweeper;

  /** One slot; {@code length} bytes of a put's rows were written at its start. */
  static final class Slot {
    final Path path;
    final MappedByteBuffer buffer;
    boolean linked = true;
    long freedAt;
    int length;

    Slot(Path path, MappedByteBuffer buffer) {
      this.path = path;
      this.buffer = buffer;
    }

    /** A channel that writes into this slot from its start (an IOException when full). */
    WritableByteChannel writer() {
      ByteBuffer out = buffer.duplicate().clear();
      return new WritableByteChannel() {
        @Override
        public int write(ByteBuffer src) throws IOException {
          int n = src.remaining();
          if (n > out.remaining()) {
            throw new IOException("rayq: a put's rows outgrew their slot");
          }
          out.put(src);
          length = out.position();
          return n;
        }

        @Override
        public boolean isOpen() {
          return true;
        }

        @Override
        public void close() {}
      };
    }

    byte[] copy() {
      byte[] rows = new byte[length];
      buffer.get(0, rows);
      return rows;
    }
  }

  private SharedSlots() {}

  /** A free slot of at least {@code size} bytes for {@code broker}; null: none here. */
  static synchronized Slot acquire(String dir, String broker, long size) {
    sweep();
    ArrayDeque<Slot> free = FREE.computeIfAbsent(broker, b -> new ArrayDeque<>());
    for (Iterator<Slot> it = free.iterator(); it.hasNext(); ) {
      Slot slot = it.next();
      if (slot.buffer.capacity() >= size) {
        it.remove();
        slot.length = 0;
        return slot;
      }
    }
    long capacity = ((size >> 20) + 1) << 20;
    if (bytes + capacity > MAX_BYTES) {
      return null;
    }
    Path path = Path.of(dir, "rayq-put-" + UUID.randomUUID().toString().replace("-", ""));
    try {
      if (Files.getFileStore(Path.of(dir)).getUsableSpace() < capacity + KEEP_FREE) {
        return null;
      }
      try (FileChannel file = FileChannel.open(path, StandardOpenOption.CREATE_NEW,
          StandardOpenOption.READ, StandardOpenOption.WRITE)) {
        ByteBuffer zeros = ByteBuffer.allocateDirect(ZEROS);
        for (long at = 0; at < capacity; at += ZEROS) {
          zeros.clear();
          while (zeros.hasRemaining()) {
            file.write(zeros, at + zeros.position());
          }
        }
        Slot slot = new Slot(path, file.map(FileChannel.MapMode.READ_WRITE, 0, capacity));
        bytes += capacity;
        if (sweeper == null) {
          sweeper = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "rayq-slot-sweeper");
            t.setDaemon(true);
            return t;
          });
          sweeper.scheduleWithFixedDelay(SharedSlots::sweep, 10, 10, TimeUnit.SECONDS);
        }
        return slot;
      }
    } catch (IOException | RuntimeException e) {
      LOG.info("rayq: no shared-memory slot in {} ({}); rows go through Ray", dir, e.toString());
      unlink(path);
      return null;
    }
  }

  /** A slot whose put was answered: free again, its file unlinked after its first put. */
  static synchronized void release(String broker, Slot slot) {
    if (slot.linked) {
      unlink(slot.path);
      slot.linked = false;
    }
    slot.freedAt = System.nanoTime();
    FREE.computeIfAbsent(broker, b -> new ArrayDeque<>()).addFirst(slot);
  }

  /** A slot not to be used again (its put failed, or the task ended with it in flight). */
  static synchronized void discard(Slot slot) {
    drop(slot);
  }

  /** Drops the free slots idle for {@code IDLE_NANOS}. */
  private static synchronized void sweep() {
    long now = System.nanoTime();
    for (ArrayDeque<Slot> free : FREE.values()) {
      for (Iterator<Slot> it = free.iterator(); it.hasNext(); ) {
        Slot slot = it.next();
        if (now - slot.freedAt > IDLE_NANOS) {
          it.remove();
          drop(slot);
        }
      }
    }
  }

  private static void drop(Slot slot) {
    unlink(slot.path);
    slot.linked = false;
    bytes -= slot.buffer.capacity();
    unmap(slot.buffer); // nothing refers to a dropped slot's buffer any more
  }

  /** Unmaps now (sun.misc.Unsafe.invokeCleaner); else the garbage collector does it. */
  private static void unmap(ByteBuffer buffer) {
    try {
      Class<?> unsafeClass = Class.forName("sun.misc.Unsafe");
      Field field = unsafeClass.getDeclaredField("theUnsafe");
      field.setAccessible(true);
      unsafeClass.getMethod("invokeCleaner", ByteBuffer.class)
          .invoke(field.get(null), buffer);
    } catch (ReflectiveOperationException | RuntimeException e) {
      LOG.debug("rayq: a slot is left to the garbage collector to unmap: {}", e.toString());
    }
  }

  private static void unlink(Path path) {
    try {
      Files.deleteIfExists(path);
    } catch (IOException e) {
      LOG.warn("rayq: cannot remove {}: {}", path, e.toString());
    }
  }
}
