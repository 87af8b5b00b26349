package broker_test

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
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
	b := openOn(t, db)
	if _, err := b.Send(broker.Queue, "q", &broker.Message{ID: "first", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)

	m := &broker.Message{ID: "m1", Body: []byte("body"), Properties: map[string]string{"a": "b"}}
	want := *m
	if seq, err := b.Send(broker.Queue, "q", m); err == nil || seq != 0 {
		t.Fatalf("Send with a failing fsync: seq %d, err %v", seq, err)
	}
	if !reflect.DeepEqual(*m, want) {
		t.Errorf("failed Send changed the message: %+v", *m)
	}

	tx := b.BeginTx()
	m2 := &broker.Message{ID: "m2", Body: []byte("b2")}
	m3 := &broker.Message{ID: "m3", Body: []byte("b3")}
	for _, mm := range []*broker.Message{m2, m3} {
		if err := tx.Send(broker.Queue, "q", mm); err != nil {
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
	b := openBroker(t, vfs.NewMem())
	if _, err := b.Send(broker.Queue, "q", &broker.Message{ID: "dup", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	tx := b.BeginTx()
	a, dup := &broker.Message{ID: "a"}, &broker.Message{ID: "dup"}
	tx.Send(broker.Queue, "q", a)
	tx.Send(broker.Queue, "q", dup)
	if err := tx.Commit(); !errors.Is(err, broker.ErrDuplicate) {
		t.Fatalf("Commit with a duplicate: %v", err)
	}
	if a.Seq != 0 || dup.Seq != 0 {
		t.Errorf("failed Commit handed out %d, %d", a.Seq, dup.Seq)
	}
	tx = b.BeginTx()
	mb, mc := &broker.Message{ID: "b"}, &broker.Message{ID: "c"}
	tx.Send(broker.Queue, "q", mb)
	tx.Send(broker.Topic, "t", &broker.Message{ID: "t1"})
	tx.Send(broker.Queue, "q", mc)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if mb.Seq != 2 || mc.Seq != 3 {
		t.Errorf("Commit handed out %d, %d; want 2, 3", mb.Seq, mc.Seq)
	}
}

// Bad input to the broker API is ErrInvalid with a message that says what.
func TestBroker_BadInputIsInvalid(t *testing.T) {
	b := openBroker(t, vfs.NewMem())
	if _, err := b.Send(broker.Queue, "q", &broker.Message{ID: "p1", ProducerID: "p", ProducerSeq: 5}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", broker.MaxNameSize+1)
	cases := []struct {
		name, want string
		call       func() error
	}{
		{"producer seq MaxUint64", "sequence", func() error {
			_, err := b.Send(broker.Queue, "q", &broker.Message{ID: "p2", ProducerID: "p", ProducerSeq: math.MaxUint64})
			return err
		}},
		{"tx producer seq MaxUint64", "sequence", func() error {
			return b.BeginTx().Send(broker.Queue, "q", &broker.Message{ID: "p3", ProducerID: "p", ProducerSeq: math.MaxUint64})
		}},
		{"dest kind 0", "destination kind", func() error {
			_, err := b.Send(0, "q", &broker.Message{ID: "k"})
			return err
		}},
		{"dest kind 7", "destination kind", func() error {
			_, err := b.Send(7, "q", &broker.Message{ID: "k"})
			return err
		}},
		{"tx dest kind", "destination kind", func() error { return b.BeginTx().Send(9, "q", &broker.Message{ID: "k"}) }},
		{"read dest kind", "destination kind", func() error { _, err := b.Read(3, "q", 0, 1); return err }},
		{"destination kind", "destination kind", func() error { _, err := b.Destination(0, "q"); return err }},
		{"empty destination", "destination name", func() error { _, err := b.Send(broker.Queue, "", &broker.Message{ID: "k"}); return err }},
		{"long destination", "destination name", func() error { _, err := b.Send(broker.Queue, long, &broker.Message{ID: "k"}); return err }},
		{"empty message ID", "message ID", func() error { _, err := b.Send(broker.Queue, "q", &broker.Message{}); return err }},
		{"long message ID", "message ID", func() error { _, err := b.Send(broker.Queue, "q", &broker.Message{ID: long}); return err }},
		{"long producer ID", "producer ID", func() error {
			_, err := b.Send(broker.Queue, "q", &broker.Message{ID: "k", ProducerID: long})
			return err
		}},
		{"nil message", "nil message", func() error { _, err := b.Send(broker.Queue, "q", nil); return err }},
		{"oversized body", "message of at least", func() error {
			_, err := b.Send(broker.Queue, "q", &broker.Message{ID: "big", Body: make([]byte, kdb.MaxValueSize+1)})
			return err
		}},
		{"tx oversized body", "message of at least", func() error {
			return b.BeginTx().Send(broker.Queue, "q", &broker.Message{ID: "big", Body: make([]byte, kdb.MaxValueSize+1)})
		}},
		{"tx nil message", "nil message", func() error { return b.BeginTx().Send(broker.Queue, "q", nil) }},
		{"tx empty message ID", "message ID", func() error { return b.BeginTx().Send(broker.Queue, "q", &broker.Message{}) }},
		{"tx ack on a topic", "AckSub", func() error { return b.BeginTx().Ack(broker.Topic, "t", 1) }},
		{"tx ack empty dest", "destination name", func() error { return b.BeginTx().Ack(broker.Queue, "", 1) }},
		{"tx acksub empty sub", "subscription name", func() error { return b.BeginTx().AckSub("t", "", 1) }},
		{"negative Read", "Read of -1", func() error { _, err := b.Read(broker.Queue, "q", 0, -1); return err }},
		{"negative ReadSub", "ReadSub of -1", func() error { _, err := b.ReadSub("t", "s", 0, -1); return err }},
		{"empty GetMessage ID", "message ID", func() error { _, err := b.GetMessage(broker.Queue, "q", ""); return err }},
		{"empty subscription", "subscription name", func() error { return b.Subscribe("t", "") }},
		{"empty prepare xid", "transaction ID", func() error { return b.BeginTx().Prepare("") }},
	}
	for _, c := range cases {
		err := c.call()
		if !errors.Is(err, kdb.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid mentioning %q", c.name, err, c.want)
		}
	}
	// The producer is not stuck: its next sequence still goes in.
	if _, err := b.Send(broker.Queue, "q", &broker.Message{ID: "p4", ProducerID: "p", ProducerSeq: math.MaxUint64 - 1}); err != nil {
		t.Errorf("producer seq MaxUint64-1: %v", err)
	}
}
