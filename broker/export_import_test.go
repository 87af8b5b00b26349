package broker_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
	"github.com/kdb-project/kdb/vfs"
)

// brokerState is what a broker shows through its API: every destination,
// its messages, its subscriptions and what each has pending, and the
// prepared transactions.
type brokerState struct {
	Dests    []broker.DestInfo
	Messages map[string][]broker.Message
	Subs     map[string][]broker.SubInfo
	Pending  map[string][]broker.Message
	Prepared []string
}

func stateOf(t *testing.T, b *broker.Broker) brokerState {
	t.Helper()
	st := brokerState{Messages: map[string][]broker.Message{}, Subs: map[string][]broker.SubInfo{}, Pending: map[string][]broker.Message{}}
	var err error
	if st.Dests, err = b.Destinations(); err != nil {
		t.Fatal(err)
	}
	for _, d := range st.Dests {
		key := fmt.Sprint(d.Kind, "/", d.Name)
		if st.Messages[key], err = b.Read(d.Kind, d.Name, 0, 1<<20); err != nil {
			t.Fatal(err)
		}
		if d.Kind != broker.Topic {
			continue
		}
		if st.Subs[d.Name], err = b.Subscriptions(d.Name); err != nil {
			t.Fatal(err)
		}
		for _, s := range st.Subs[d.Name] {
			if st.Pending[d.Name+"/"+s.Name], err = b.ReadSub(d.Name, s.Name, 0, 1<<20); err != nil {
				t.Fatal(err)
			}
		}
	}
	if st.Prepared, err = b.Prepared(); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestExport_ImportKeepsTheBroker exports a store holding broker state
// (kdb.DB.Export) and imports it (kdb.Import): the broker on the imported
// store is the same, down to sequence numbers, pending counts, the prepared
// transaction and the producer audit. The byte-for-byte comparison of every
// tree is the root package's TestExport_ImportGivesTheSameStore.
func TestExport_ImportKeepsTheBroker(t *testing.T) {
	mem := vfs.NewMem()
	o := &kdb.Options{FS: mem, SegmentSize: 256 << 10}
	db, err := kdb.Open("/src", o)
	if err != nil {
		t.Fatal(err)
	}
	b := openOn(t, db)
	// Broker state: a queue with acked and kept messages, a topic with two
	// subscriptions at different positions, a prepared transaction.
	for i := 1; i <= 20; i++ {
		if _, err := b.Send(broker.Queue, "q", &broker.Message{ID: fmt.Sprint("m", i), ProducerID: "p", ProducerSeq: uint64(i), Body: bytes.Repeat([]byte("b"), 100*i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Ack(broker.Queue, "q", 1, 2, 3); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"s1", "s2"} {
		if err := b.Subscribe("t", s); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 5; i++ {
		if _, err := b.Send(broker.Topic, "t", &broker.Message{ID: fmt.Sprint("t", i), Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.AckSub("t", "s1", 1, 2); err != nil {
		t.Fatal(err)
	}
	tx := b.BeginTx()
	if err := tx.Send(broker.Queue, "q", &broker.Message{ID: "prep", Body: []byte("p")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Prepare("xid-1"); err != nil {
		t.Fatal(err)
	}

	var snap bytes.Buffer
	rep, err := db.Export(&snap)
	if err != nil {
		t.Fatal(err)
	}
	want := stateOf(t, b)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if rep.Keys == 0 || rep.Trees < 4 {
		t.Fatalf("export report %+v", rep)
	}

	irep, err := kdb.Import("/dst", bytes.NewReader(snap.Bytes()), o)
	if err != nil {
		t.Fatal(err)
	}
	if *irep != *rep {
		t.Fatalf("import read %+v, export wrote %+v", irep, rep)
	}
	ddb, err := kdb.Open("/dst", o)
	if err != nil {
		t.Fatal(err)
	}
	defer ddb.Close()
	dst := openOn(t, ddb)
	if got := stateOf(t, dst); !reflect.DeepEqual(got, want) {
		t.Fatalf("imported broker:\n%+v\nexported:\n%+v", got, want)
	}
	if err := checkStore(dst); err != nil {
		t.Fatal(err)
	}
	// The broker sees the same store: sequence numbers, pending counts,
	// the prepared transaction, and the producer audit.
	if p, err := dst.Pending("t", "s1"); err != nil || p != 3 {
		t.Fatalf("pending s1: %d, %v", p, err)
	}
	if x, err := dst.Prepared(); err != nil || len(x) != 1 || x[0] != "xid-1" {
		t.Fatalf("prepared: %v, %v", x, err)
	}
	if _, err := dst.Send(broker.Queue, "q", &broker.Message{ID: "again", ProducerID: "p", ProducerSeq: 5}); !errors.Is(err, broker.ErrDuplicate) {
		t.Fatalf("producer audit lost: %v", err)
	}
	if err := dst.CommitPrepared("xid-1"); err != nil {
		t.Fatal(err)
	}
	if d, err := dst.Destination(broker.Queue, "q"); err != nil || d.Count != 18 || d.NextSeq != 22 {
		t.Fatalf("queue after import and commit: %+v, %v", d, err)
	}
	if err := checkStore(dst); err != nil {
		t.Fatal(err)
	}
}
