package broker_test

import (
	"errors"
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
