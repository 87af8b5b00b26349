package broker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
	"github.com/kdb-project/kdb/internal/kdbtest/dbtest"
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

// TestAckAsync_BacklogPowerCuts: the same backlog acked one message at a
// time with AckAsync and nothing else written, so that the engine's
// bounded queue of deferred transactions is committed, unsynced, by the
// AckAsync that fills it; power cuts (every campaign setting: unsynced
// sectors dropped, kept, half kept, half garbled) at points along the way.
// Acks are at-least-once, so an image may have lost any of them, but the
// journal is durable as a prefix and the acks were made in sequence order:
// an image holds the queue's messages from some sequence number on, with
// no hole, its count agrees, and it checks clean. After Sync, a power cut
// keeps every ack.
func TestAckAsync_BacklogPowerCuts(t *testing.T) {
	fs := vfs.NewMem()
	opts := dbtest.CampaignOptions(fs)
	opts.SyncInterval = time.Hour
	db, err := kdb.Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := openOn(t, db)
	const n = 2600
	for i := range n {
		mustSend(t, b, broker.Queue, "q", msg(fmt.Sprint("m", i), "", 0, "x"))
	}
	check := func(at int, img *vfs.MemFS, wantEmpty bool) {
		t.Helper()
		db2, err := kdb.Open("/db", dbtest.CampaignOptions(img))
		if err != nil {
			t.Fatalf("after %d AckAsyncs, a power cut: open: %v", at, err)
		}
		defer db2.Close()
		b2 := openOn(t, db2)
		ms, err := b2.Read(broker.Queue, "q", 0, n+1)
		if err != nil {
			t.Fatalf("after %d AckAsyncs, a power cut: read: %v", at, err)
		}
		d, err := b2.Destination(broker.Queue, "q")
		if err != nil || d.Count != uint64(len(ms)) {
			t.Fatalf("after %d AckAsyncs, a power cut: %+v, %v; %d messages read", at, d, err, len(ms))
		}
		first := uint64(n + 1)
		if len(ms) > 0 {
			first = ms[0].Seq
		}
		for i, m := range ms {
			if m.Seq != first+uint64(i) || m.ID != fmt.Sprint("m", m.Seq-1) {
				t.Fatalf("after %d AckAsyncs, a power cut: message %d is seq %d id %q: a hole in what the acks left", at, i, m.Seq, m.ID)
			}
		}
		if first+uint64(len(ms)) != n+1 {
			t.Fatalf("after %d AckAsyncs, a power cut: %d messages from seq %d; want every one up to %d", at, len(ms), first, n)
		}
		if first-1 > uint64(at) {
			t.Fatalf("after %d AckAsyncs, a power cut: %d messages acked", at, first-1)
		}
		if wantEmpty && len(ms) != 0 {
			t.Fatalf("after every AckAsync and Sync, a power cut: %d messages left (from seq %d)", len(ms), first)
		}
		if err := checkStore(b2); err != nil {
			t.Fatalf("after %d AckAsyncs, a power cut: %v", at, err)
		}
	}
	for i := 1; i <= n; i++ {
		if err := b.AckAsync(broker.Queue, "q", uint64(i)); err != nil {
			t.Fatalf("AckAsync %d: %v", i, err)
		}
		if i%500 == 0 || i == 1024 || i == 1025 || i == 2048 {
			for s, set := range dbtest.CampaignSettings {
				set.Seed = int64(i*10 + s)
				check(i, fs.CrashClone(set), false)
			}
		}
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	for s, set := range dbtest.CampaignSettings {
		set.Seed = int64(s)
		check(n, fs.CrashClone(set), true)
	}
}
