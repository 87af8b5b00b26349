package broker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
	"github.com/kdb-project/kdb/vfs"
)

// An AckAsync is durable once a later synced write returns, even one that
// finds nothing to write: a Subscribe of a subscription that exists, a
// Purge of an empty queue, an empty transaction's Commit. Those used to
// return nil with the ack journaled but not synced (the engine's Update
// with nothing to write skipped the sync of the deferred acks it ran; an
// empty Tx.Commit never reached the store), and a power loss then brought
// the message back (an outside tester, 2026-12-07).
func TestAckAsync_DurableAfterAWriteThatWritesNothing(t *testing.T) {
	calls := map[string]func(b *broker.Broker) error{
		"send": func(b *broker.Broker) error {
			_, err := b.Send(broker.Queue, "other", msg("o", "p2", 1, "x"))
			return err
		},
		"subscribe-existing": func(b *broker.Broker) error { return b.Subscribe("t", "s") },
		"purge-empty":        func(b *broker.Broker) error { return b.Purge(broker.Queue, "empty") },
		"tx-empty-commit":    func(b *broker.Broker) error { return b.BeginTx().Commit() },
		"ack-no-seqs":        func(b *broker.Broker) error { return b.Ack(broker.Queue, "q") },
		"create-existing":    func(b *broker.Broker) error { return b.CreateDestination(broker.Queue, "q") },
		"update-empty": func(b *broker.Broker) error {
			return b.DB().Update(func(*kdb.Txn) error { return nil })
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			o := &kdb.Options{FS: fs, SyncInterval: time.Hour, CheckpointInterval: -1}
			db, err := kdb.Open("/s", o)
			if err != nil {
				t.Fatal(err)
			}
			b, err := broker.Open(db)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Subscribe("t", "s"); err != nil {
				t.Fatal(err)
			}
			if err := b.CreateDestination(broker.Queue, "empty"); err != nil {
				t.Fatal(err)
			}
			var seqs []uint64
			for i := range 3 {
				s, err := b.Send(broker.Queue, "q", msg(fmt.Sprint("m", i), "p", uint64(i+1), "body"))
				if err != nil {
					t.Fatal(err)
				}
				seqs = append(seqs, s)
			}
			if err := b.AckAsync(broker.Queue, "q", seqs[0]); err != nil {
				t.Fatal(err)
			}
			if err := call(b); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			img := fs.CrashClone(vfs.CrashOptions{}) // a power loss now
			db.Close()
			o.FS = img
			db2, err := kdb.Open("/s", o)
			if err != nil {
				t.Fatal(err)
			}
			defer db2.Close()
			b2, err := broker.Open(db2)
			if err != nil {
				t.Fatal(err)
			}
			d, err := b2.Destination(broker.Queue, "q")
			if err != nil {
				t.Fatal(err)
			}
			if d.Count != 2 {
				t.Fatalf("AckAsync, then %s returned nil, then a power loss: %d messages in the queue, want 2 (the ack was not durable)", name, d.Count)
			}
		})
	}
}
