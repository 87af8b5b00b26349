package broker_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
	"github.com/kdb-project/kdb/vfs"
)

// AckAsync is ordered at once: the broker's next writes see the ack before
// it is applied, an unknown sequence is refused at once, and Sync makes
// the readers see it.
func TestAckAsync_OrderedAtOnce(t *testing.T) {
	b := openBroker(t, vfs.NewMem())
	var seqs []uint64
	for i := range 3 {
		seqs = append(seqs, mustSend(t, b, broker.Queue, "q", msg(string(rune('a'+i)), "", 0, "x")))
	}
	if err := b.AckAsync(broker.Queue, "q", seqs[0]); err != nil {
		t.Fatal(err)
	}
	if err := b.Ack(broker.Queue, "q", seqs[0]); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("Ack after AckAsync of the same message: %v, want ErrNotFound", err)
	}
	if err := b.AckAsync(broker.Queue, "q", 999); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("AckAsync of an unknown message: %v, want ErrNotFound", err)
	}
	if err := b.AckAsync(broker.Queue, "q", seqs[1]); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	d, err := b.Destination(broker.Queue, "q")
	if err != nil || d.Count != 1 {
		t.Fatalf("after Sync: %+v, %v; want 1 message", d, err)
	}
	ms, err := b.Read(broker.Queue, "q", 0, 10)
	if err != nil || len(ms) != 1 || ms[0].Seq != seqs[2] {
		t.Fatalf("after Sync: read %v, %v; want only seq %d", ms, err, seqs[2])
	}
}

// AckAsync does not wait for an fsync: not its own, and not the one of a
// Send in flight before it (its commit is applied after that Send's, which
// waits for the disk).
func TestAckAsync_DoesNotWaitForTheDisk(t *testing.T) {
	const syncTime = 300 * time.Millisecond
	var slow atomic.Bool
	syncing := make(chan struct{}, 1)
	fs := vfs.Intercept(vfs.NewMem(), func(e vfs.Event) error {
		if e.Op == vfs.OpSync && slow.Load() && strings.Contains(e.Path, ".log") {
			select {
			case syncing <- struct{}{}:
			default:
			}
			time.Sleep(syncTime)
		}
		return nil
	})
	b := openBroker(t, fs)
	first := mustSend(t, b, broker.Queue, "q", msg("first", "", 0, "x"))
	slow.Store(true)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		mustSend(t, b, broker.Queue, "q", msg("second", "", 0, "y"))
	}()
	<-syncing // the Send's fsync has begun
	start := time.Now()
	if err := b.AckAsync(broker.Queue, "q", first); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > syncTime/2 {
		t.Errorf("AckAsync took %v while a %v fsync ran: it waited for the disk", took, syncTime)
	}
	wg.Wait()
	slow.Store(false)
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if d, err := b.Destination(broker.Queue, "q"); err != nil || d.Count != 1 {
		t.Fatalf("after Sync: %+v, %v; want 1 message", d, err)
	}
}

// An AckAsync of a message whose AckAsync is still on its way (deferred,
// not yet applied) is refused, even when it comes from another goroutine;
// so is one listing a message twice. After Sync the message is gone once.
func TestAckAsync_TwiceIsNotFound(t *testing.T) {
	b := openBroker(t, vfs.NewMem())
	a := mustSend(t, b, broker.Queue, "q", msg("a", "", 0, "x"))
	c := mustSend(t, b, broker.Queue, "q", msg("c", "", 0, "z"))
	if err := b.AckAsync(broker.Queue, "q", c, c); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("AckAsync listing one message twice: %v, want ErrNotFound", err)
	}
	var ok, notFound atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch err := b.AckAsync(broker.Queue, "q", a); {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, kdb.ErrNotFound):
				notFound.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 1 || notFound.Load() != 7 {
		t.Fatalf("8 concurrent AckAsyncs of one message: %d accepted, %d ErrNotFound; want 1 and 7", ok.Load(), notFound.Load())
	}
	if err := b.AckAsync(broker.Queue, "q", a); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("AckAsync again: %v, want ErrNotFound", err)
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := b.AckAsync(broker.Queue, "q", a); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("AckAsync after the ack was applied: %v, want ErrNotFound", err)
	}
	if d, err := b.Destination(broker.Queue, "q"); err != nil || d.Count != 1 {
		t.Fatalf("after Sync: %+v %v, want the one message c", d, err)
	}
	if err := checkStore(b); err != nil {
		t.Fatal(err)
	}
}

// Sync does not wait for an AckAsync that had not returned when it began:
// one racing it, on an idle store, could be queued after the engine's Sync
// ran the deferred acks, and Sync then waited for the SyncInterval timer
// to run it (an outside tester saw 2 s stalls with a 2 s SyncInterval).
func TestSync_NotHeldByAnAckAsyncStillRunning(t *testing.T) {
	o := &kdb.Options{FS: vfs.NewMem(), SyncInterval: 5 * time.Second}
	db, err := kdb.Open("/db", o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b, err := broker.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	tx := b.BeginTx()
	ms := make([]*broker.Message, n)
	for i := range ms {
		ms[i] = &broker.Message{ID: fmt.Sprint("m-", i)}
		if err := tx.Send(broker.Queue, "q", ms[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		start := make(chan struct{})
		var wg sync.WaitGroup
		var took time.Duration
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			if err := b.AckAsync(broker.Queue, "q", m.Seq); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			<-start
			t0 := time.Now()
			if err := b.Sync(); err != nil {
				t.Error(err)
			}
			took = time.Since(t0)
		}()
		close(start)
		wg.Wait()
		if took > time.Second {
			t.Fatalf("round %d: Sync took %v, racing an AckAsync (SyncInterval %v)", i, took, o.SyncInterval)
		}
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if d, err := b.Destination(broker.Queue, "q"); err != nil || d.Count != 0 {
		t.Fatalf("after %d AckAsyncs and a Sync: %+v, %v; want an empty queue", n, d, err)
	}
}
