package broker_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
	"github.com/kdb-project/kdb/vfs"
)

// within runs fn and fails the test if it has not returned after d: a
// deadlock shows as a failure, not as a hung test binary.
func within(t *testing.T, d time.Duration, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("%s did not return within %v (deadlock)", what, d)
		return nil
	}
}

// A broker write from inside an Update function of its DB returns
// ErrInvalid at once (it would wait for the Update to end): the broker's
// part of the root's TestDB_NestedCallsNeverDeadlock. Nothing of it is
// written.
func TestBroker_WriteInsideUpdateIsInvalid(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), CheckpointInterval: -1, SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := openOn(t, db)
	if _, err := b.Send(broker.Queue, "q", &broker.Message{ID: "m0", Body: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	misuse := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, kdb.ErrInvalid) {
			t.Fatalf("%s inside Update: %v, want ErrInvalid", what, err)
		}
	}
	err = within(t, 10*time.Second, "Update", func() error {
		return db.Update(func(*kdb.Txn) error {
			_, err := b.Send(broker.Queue, "q", &broker.Message{ID: "m1", Body: []byte("m")})
			misuse("Send", err)
			misuse("Ack", b.Ack(broker.Queue, "q", 1))
			misuse("AckAsync", b.AckAsync(broker.Queue, "q", 1))
			misuse("Subscribe", b.Subscribe("t", "s"))
			tx := b.BeginTx()
			if err := tx.Send(broker.Queue, "q", &broker.Message{ID: "m2"}); err != nil {
				return err
			}
			misuse("Tx.Commit", tx.Commit())
			// Reads work: they see the committed state.
			if ms, err := b.Read(broker.Queue, "q", 0, 10); err != nil || len(ms) != 1 {
				t.Errorf("Read inside Update: %d messages, %v", len(ms), err)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := b.Read(broker.Queue, "q", 0, 10)
	if err != nil || len(ms) != 1 || ms[0].ID != "m0" {
		t.Fatalf("after the Update: %+v, %v (a refused nested write was applied?)", ms, err)
	}
	if _, err := b.Destination(broker.Topic, "t"); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("a refused nested Subscribe created the topic: %v", err)
	}
	if err := checkStore(b); err != nil {
		t.Fatal(err)
	}
}

// A Broker whose DB was closed returns kdb.ErrClosed from every call, and
// leaves the caller's message as it was.
func TestBroker_AfterCloseIsClosed(t *testing.T) {
	fs := vfs.NewMem()
	db, err := kdb.Open("/db", brokerOpts(fs))
	if err != nil {
		t.Fatal(err)
	}
	b := openOn(t, db)
	if _, err := b.Send(broker.Queue, "q", &broker.Message{ID: "m0"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Subscribe("t", "s"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	closed := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, kdb.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", what, err)
		}
	}
	m := &broker.Message{ID: "m1", Body: []byte("x")}
	seq, err := b.Send(broker.Queue, "q", m)
	closed("Send", err)
	if seq != 0 || m.Seq != 0 {
		t.Errorf("Send after Close handed out %d (m.Seq %d)", seq, m.Seq)
	}
	closed("Ack", b.Ack(broker.Queue, "q", 1))
	closed("AckAsync", b.AckAsync(broker.Queue, "q", 1))
	closed("AckSub", b.AckSub("t", "s", 1))
	closed("Subscribe", b.Subscribe("t", "s2"))
	closed("Unsubscribe", b.Unsubscribe("t", "s"))
	closed("Purge", b.Purge(broker.Queue, "q"))
	closed("DeleteDestination", b.DeleteDestination(broker.Queue, "q"))
	tx := b.BeginTx()
	if err := tx.Send(broker.Queue, "q", &broker.Message{ID: "m2"}); err != nil {
		t.Fatal(err)
	}
	closed("Tx.Commit", tx.Commit())
	tx = b.BeginTx()
	if err := tx.Send(broker.Queue, "q", &broker.Message{ID: "m3"}); err != nil {
		t.Fatal(err)
	}
	closed("Tx.Prepare", tx.Prepare("x"))
	closed("CommitPrepared", b.CommitPrepared("x"))
	closed("RollbackPrepared", b.RollbackPrepared("x"))
	_, err = b.Read(broker.Queue, "q", 0, 1)
	closed("Read", err)
	_, err = b.Destinations()
	closed("Destinations", err)
	_, err = b.Prepared()
	closed("Prepared", err)
	closed("Check", b.Check())

	// Nothing of it reached the store.
	db2, err := kdb.Open("/db", brokerOpts(fs))
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	b2 := openOn(t, db2)
	if ms, err := b2.Read(broker.Queue, "q", 0, 10); err != nil || len(ms) != 1 || ms[0].ID != "m0" {
		t.Fatalf("after reopen: %+v, %v", ms, err)
	}
	if err := checkStore(b2); err != nil {
		t.Fatal(err)
	}
}

// Broker.Sync called inside the function of an Update, a Submit (the DB's
// or a namespace's) or a deferred transaction, or inside a deferred
// transaction's done, is ErrInvalid at once, with an AckAsync waiting: the
// host may have taken that ack, applied only after the function returns,
// and Sync waited for it for good, and Close behind it (an outside tester,
// 2026-12-08). Inside a View it works, and after each refusal the ack is
// applied.
func TestSync_InsideATransactionFunctionIsInvalid(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), CheckpointInterval: -1, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Not closed on a failure: a hung Sync would hang Close too.
	b := openOn(t, db)
	ackOne := func(id string) {
		t.Helper()
		seq, err := b.Send(broker.Queue, "q", &broker.Message{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.AckAsync(broker.Queue, "q", seq); err != nil {
			t.Fatal(err)
		}
	}
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, kdb.ErrInvalid) || !strings.Contains(err.Error(), "Broker.Sync") {
			t.Fatalf("Broker.Sync inside %s: %v, want ErrInvalid naming Broker.Sync", what, err)
		}
	}
	gone := func(what, id string) {
		t.Helper()
		if err := b.Sync(); err != nil {
			t.Fatalf("after %s: Sync: %v", what, err)
		}
		if _, err := b.GetMessage(broker.Queue, "q", id); !errors.Is(err, kdb.ErrNotFound) {
			t.Fatalf("after %s: message %s: %v, want ErrNotFound (its ack applied)", what, id, err)
		}
	}
	cases := []struct {
		name string
		run  func() error
	}{
		{"Submit", func() error {
			c, err := db.Submit(func(*kdb.Txn) error { refused("Submit", b.Sync()); return nil })
			if err != nil {
				return err
			}
			return c.Wait()
		}},
		{"a namespace's Submit", func() error {
			ns, err := db.Namespace("b")
			if err != nil {
				return err
			}
			c, err := ns.Submit(func(*kdb.Txn) error { refused("a namespace's Submit", b.Sync()); return nil })
			if err != nil {
				return err
			}
			return c.Wait()
		}},
		{"Update", func() error {
			return db.Update(func(*kdb.Txn) error { refused("Update", b.Sync()); return nil })
		}},
		{"a deferred transaction", func() error {
			if err := db.Defer(func(*kdb.Txn) error { refused("a deferred transaction", b.Sync()); return nil }, nil); err != nil {
				return err
			}
			return db.Put("u", []byte("k"), []byte("v"))
		}},
		{"a deferred transaction's done", func() error {
			if err := db.Defer(func(*kdb.Txn) error { return nil }, func(error) { refused("a done", b.Sync()) }); err != nil {
				return err
			}
			return db.Put("u", []byte("k"), []byte("v"))
		}},
		{"View", func() error {
			return db.View(func(*kdb.Snapshot) error { return b.Sync() })
		}},
	}
	for i, c := range cases {
		id := fmt.Sprintf("m%d", i)
		ackOne(id)
		if err := within(t, 10*time.Second, c.name, c.run); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		gone(c.name, id)
	}
	if err := within(t, 10*time.Second, "Close", db.Close); err != nil {
		t.Fatal(err)
	}
}

// broker.Open of a nil DB is ErrInvalid, not a nil dereference.
func TestOpen_NilDBIsInvalid(t *testing.T) {
	if b, err := broker.Open(nil); !errors.Is(err, kdb.ErrInvalid) || b != nil {
		t.Fatalf("broker.Open(nil) = %v, %v; want nil, ErrInvalid", b, err)
	}
}
