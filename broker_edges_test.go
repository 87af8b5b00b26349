package kdb_test

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// failingSyncFS fails every fsync of a journal segment once armed.
func failingSyncFS() (vfs.FS, *atomic.Bool) {
	var armed atomic.Bool
	fs := vfs.Intercept(vfs.NewMem(), func(e vfs.Event) error {
		if armed.Load() && e.Op == vfs.OpSync && strings.Contains(e.Path, ".log") {
			return errors.New("injected fsync error")
		}
		return nil
	})
	return fs, &armed
}

// A Send or a transaction commit that fails leaves the caller's messages
// as they were: no sequence number is handed out.
func TestBroker_FailedCommitLeavesMessagesUnchanged(t *testing.T) {
	fs, armed := failingSyncFS()
	db, err := kdb.Open("/db", brokerOpts(fs))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Send(kdb.Queue, "q", &kdb.Message{ID: "first", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)

	m := &kdb.Message{ID: "m1", Body: []byte("body"), Properties: map[string]string{"a": "b"}}
	want := *m
	if seq, err := db.Send(kdb.Queue, "q", m); err == nil || seq != 0 {
		t.Fatalf("Send with a failing fsync: seq %d, err %v", seq, err)
	}
	if !reflect.DeepEqual(*m, want) {
		t.Errorf("failed Send changed the message: %+v", *m)
	}

	tx := db.BeginTx()
	m2 := &kdb.Message{ID: "m2", Body: []byte("b2")}
	m3 := &kdb.Message{ID: "m3", Body: []byte("b3")}
	for _, mm := range []*kdb.Message{m2, m3} {
		if err := tx.Send(kdb.Queue, "q", mm); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err == nil {
		t.Fatal("Commit with a failing fsync succeeded")
	}
	if m2.Seq != 0 || m3.Seq != 0 {
		t.Errorf("failed Commit handed out sequence numbers %d, %d", m2.Seq, m3.Seq)
	}
}

// A transaction that fails at Commit for a reason of its own (a duplicate)
// hands out no sequence number either, and a successful one does.
func TestBroker_TxCommitSetsSeqOnlyOnSuccess(t *testing.T) {
	db := openBroker(t, vfs.NewMem())
	if _, err := db.Send(kdb.Queue, "q", &kdb.Message{ID: "dup", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	tx := db.BeginTx()
	a, dup := &kdb.Message{ID: "a"}, &kdb.Message{ID: "dup"}
	tx.Send(kdb.Queue, "q", a)
	tx.Send(kdb.Queue, "q", dup)
	if err := tx.Commit(); !errors.Is(err, kdb.ErrDuplicate) {
		t.Fatalf("Commit with a duplicate: %v", err)
	}
	if a.Seq != 0 || dup.Seq != 0 {
		t.Errorf("failed Commit handed out %d, %d", a.Seq, dup.Seq)
	}
	tx = db.BeginTx()
	b, c := &kdb.Message{ID: "b"}, &kdb.Message{ID: "c"}
	tx.Send(kdb.Queue, "q", b)
	tx.Send(kdb.Topic, "t", &kdb.Message{ID: "t1"})
	tx.Send(kdb.Queue, "q", c)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if b.Seq != 2 || c.Seq != 3 {
		t.Errorf("Commit handed out %d, %d; want 2, 3", b.Seq, c.Seq)
	}
}

// Bad input to the broker API is ErrInvalid with a message that says what.
func TestBroker_BadInputIsInvalid(t *testing.T) {
	db := openBroker(t, vfs.NewMem())
	if _, err := db.Send(kdb.Queue, "q", &kdb.Message{ID: "p1", ProducerID: "p", ProducerSeq: 5}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", kdb.MaxNameSize+1)
	cases := []struct {
		name, want string
		call       func() error
	}{
		{"producer seq MaxUint64", "sequence", func() error {
			_, err := db.Send(kdb.Queue, "q", &kdb.Message{ID: "p2", ProducerID: "p", ProducerSeq: math.MaxUint64})
			return err
		}},
		{"tx producer seq MaxUint64", "sequence", func() error {
			return db.BeginTx().Send(kdb.Queue, "q", &kdb.Message{ID: "p3", ProducerID: "p", ProducerSeq: math.MaxUint64})
		}},
		{"dest kind 0", "destination kind", func() error {
			_, err := db.Send(0, "q", &kdb.Message{ID: "k"})
			return err
		}},
		{"dest kind 7", "destination kind", func() error {
			_, err := db.Send(7, "q", &kdb.Message{ID: "k"})
			return err
		}},
		{"tx dest kind", "destination kind", func() error { return db.BeginTx().Send(9, "q", &kdb.Message{ID: "k"}) }},
		{"read dest kind", "destination kind", func() error { _, err := db.Read(3, "q", 0, 1); return err }},
		{"destination kind", "destination kind", func() error { _, err := db.Destination(0, "q"); return err }},
		{"empty destination", "destination name", func() error { _, err := db.Send(kdb.Queue, "", &kdb.Message{ID: "k"}); return err }},
		{"long destination", "destination name", func() error { _, err := db.Send(kdb.Queue, long, &kdb.Message{ID: "k"}); return err }},
		{"empty message ID", "message ID", func() error { _, err := db.Send(kdb.Queue, "q", &kdb.Message{}); return err }},
		{"long message ID", "message ID", func() error { _, err := db.Send(kdb.Queue, "q", &kdb.Message{ID: long}); return err }},
		{"long producer ID", "producer ID", func() error {
			_, err := db.Send(kdb.Queue, "q", &kdb.Message{ID: "k", ProducerID: long})
			return err
		}},
		{"nil message", "nil message", func() error { _, err := db.Send(kdb.Queue, "q", nil); return err }},
		{"tx nil message", "nil message", func() error { return db.BeginTx().Send(kdb.Queue, "q", nil) }},
		{"tx empty message ID", "message ID", func() error { return db.BeginTx().Send(kdb.Queue, "q", &kdb.Message{}) }},
		{"tx ack on a topic", "AckSub", func() error { return db.BeginTx().Ack(kdb.Topic, "t", 1) }},
		{"tx ack empty dest", "destination name", func() error { return db.BeginTx().Ack(kdb.Queue, "", 1) }},
		{"tx acksub empty sub", "subscription name", func() error { return db.BeginTx().AckSub("t", "", 1) }},
		{"negative Read", "Read of -1", func() error { _, err := db.Read(kdb.Queue, "q", 0, -1); return err }},
		{"negative ReadSub", "ReadSub of -1", func() error { _, err := db.ReadSub("t", "s", 0, -1); return err }},
		{"empty GetMessage ID", "message ID", func() error { _, err := db.GetMessage(kdb.Queue, "q", ""); return err }},
		{"empty subscription", "subscription name", func() error { return db.Subscribe("t", "") }},
		{"empty prepare xid", "transaction ID", func() error { return db.BeginTx().Prepare("") }},
	}
	for _, c := range cases {
		err := c.call()
		if !errors.Is(err, kdb.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid mentioning %q", c.name, err, c.want)
		}
	}
	// The producer is not stuck: its next sequence still goes in.
	if _, err := db.Send(kdb.Queue, "q", &kdb.Message{ID: "p4", ProducerID: "p", ProducerSeq: math.MaxUint64 - 1}); err != nil {
		t.Errorf("producer seq MaxUint64-1: %v", err)
	}
}
