package broker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
	"github.com/kdb-project/kdb/vfs"
)

// TestAckAsync_BacklogWithNoSends: a consumer acks a backlog one message
// at a time with AckAsync and sends nothing, with no timer to flush (an
// hour's SyncInterval). The engine's queue of deferred transactions is
// bounded: the AckAsync that fills it commits the queue, whose done
// functions take the broker's lock of async acks; AckAsync must not hold
// that lock while it hands its ack to the engine, or it waits for itself
// (the 1,024th AckAsync never returned). Every ack is applied and, after
// Sync, durable.
func TestAckAsync_BacklogWithNoSends(t *testing.T) {
	fs := vfs.NewMem()
	db, err := kdb.Open("/db", &kdb.Options{FS: fs, CheckpointInterval: -1, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	b := openOn(t, db)
	const n = 3000
	var seqs []uint64
	for i := range n {
		seqs = append(seqs, mustSend(t, b, broker.Queue, "q", msg(fmt.Sprint("m", i), "", 0, "x")))
	}
	done := make(chan error, 1)
	go func() {
		for _, s := range seqs {
			if err := b.AckAsync(broker.Queue, "q", s); err != nil {
				done <- fmt.Errorf("AckAsync %d: %w", s, err)
				return
			}
		}
		done <- b.Sync()
	}()
	// The handle is closed only once the acks returned: a Close behind a
	// stuck AckAsync would hang the test instead of failing it.
	select {
	case err := <-done:
		defer db.Close()
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%d AckAsyncs in a loop and a Sync did not return in 30 s (a Defer that commits the full queue waits for a lock its caller holds)", n)
	}
	if d, err := b.Destination(broker.Queue, "q"); err != nil || d.Count != 0 {
		t.Fatalf("after the acks and Sync: %+v, %v; want an empty queue", d, err)
	}
	img := fs.CrashClone(vfs.CrashOptions{})
	db2, err := kdb.Open("/db", &kdb.Options{FS: img})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	b2 := openOn(t, db2)
	if d, err := b2.Destination(broker.Queue, "q"); err != nil || d.Count != 0 {
		t.Fatalf("after a power cut: %+v, %v; want an empty queue", d, err)
	}
	if err := checkStore(b2); err != nil {
		t.Fatal(err)
	}
}
