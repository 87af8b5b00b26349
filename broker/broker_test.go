package broker_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
	"github.com/kdb-project/kdb/vfs"
)

func brokerOpts(fs vfs.FS) *kdb.Options {
	return &kdb.Options{FS: fs, SegmentSize: 128 << 10, ValueThreshold: 64}
}

// openOn returns the broker on db.
func openOn(t testing.TB, db *kdb.DB) *broker.Broker {
	t.Helper()
	b, err := broker.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkStore checks the engine (kdb.DB.Check) and the broker's trees
// (Broker.Check): what kdb.DB.Check checked when the broker lived in the
// root package.
func checkStore(b *broker.Broker) error {
	if _, err := b.DB().Check(); err != nil {
		return err
	}
	return b.Check()
}

// openBroker opens a store and its broker and, at cleanup, checks and
// closes it.
func openBroker(t testing.TB, fs vfs.FS) *broker.Broker {
	t.Helper()
	db, err := kdb.Open("/db", brokerOpts(fs))
	if err != nil {
		t.Fatal(err)
	}
	b := openOn(t, db)
	t.Cleanup(func() {
		if _, closed := closedDBs.Load(db); !closed && db.Err() == nil {
			if err := checkStore(b); err != nil {
				t.Errorf("check: %v", err)
			}
		}
		_ = db.Close()
	})
	return b
}

// closedDBs are the handles a test closed itself.
var closedDBs sync.Map

func reopen(t testing.TB, b *broker.Broker, fs vfs.FS) *broker.Broker {
	t.Helper()
	closedDBs.Store(b.DB(), true)
	if err := b.DB().Close(); err != nil {
		t.Fatal(err)
	}
	return openBroker(t, fs)
}

func msg(id, prod string, pseq uint64, body string) *broker.Message {
	return &broker.Message{ID: id, ProducerID: prod, ProducerSeq: pseq, Body: []byte(body),
		Properties: map[string]string{"type": "t-" + id}}
}

func mustSend(t testing.TB, b *broker.Broker, kind broker.DestKind, dest string, m *broker.Message) uint64 {
	t.Helper()
	seq, err := b.Send(kind, dest, m)
	if err != nil {
		t.Fatalf("send %s: %v", m.ID, err)
	}
	return seq
}

func TestBroker_QueueSendReadAck(t *testing.T) {
	fs := vfs.NewMem()
	b := openBroker(t, fs)
	big := string(bytes.Repeat([]byte("x"), 300)) // above ValueThreshold: kept in the journal
	for i := 1; i <= 10; i++ {
		body := fmt.Sprintf("body-%d", i)
		if i%2 == 0 {
			body += big
		}
		if seq := mustSend(t, b, broker.Queue, "orders", msg(fmt.Sprint("m", i), "p1", uint64(i), body)); seq != uint64(i) {
			t.Fatalf("seq %d, want %d", seq, i)
		}
	}
	if _, err := b.Send(broker.Queue, "orders", msg("m3", "p2", 1, "again")); !errors.Is(err, broker.ErrDuplicate) {
		t.Fatalf("duplicate ID: %v", err)
	}
	if _, err := b.Send(broker.Queue, "orders", msg("new", "p1", 10, "again")); !errors.Is(err, broker.ErrDuplicate) {
		t.Fatalf("duplicate producer seq: %v", err)
	}
	if _, err := b.Send(broker.Queue, "", msg("x", "", 0, "")); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("empty name: %v", err)
	}
	if _, err := b.Send(broker.Queue, "q", msg("", "", 0, "")); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("empty ID: %v", err)
	}
	ms, err := b.Read(broker.Queue, "orders", 4, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 || ms[0].Seq != 4 || ms[2].Seq != 6 || ms[0].ID != "m4" || ms[0].Properties["type"] != "t-m4" ||
		string(ms[0].Body) != "body-4"+big || ms[0].ProducerID != "p1" || ms[0].ProducerSeq != 4 {
		t.Fatalf("read: %+v", ms)
	}
	m, err := b.GetMessage(broker.Queue, "orders", "m7")
	if err != nil || m.Seq != 7 || string(m.Body) != "body-7" {
		t.Fatalf("get: %+v %v", m, err)
	}
	if err := b.Ack(broker.Queue, "orders", 1, 2, 7); err != nil {
		t.Fatal(err)
	}
	if err := b.Ack(broker.Queue, "orders", 3, 7); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("ack of acked: %v", err)
	}
	if _, err := b.GetMessage(broker.Queue, "orders", "m7"); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("get acked: %v", err)
	}
	if _, err := b.Read(broker.Queue, "nope", 0, 1); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("read unknown: %v", err)
	}
	check := func(b *broker.Broker) {
		t.Helper()
		di, err := b.Destination(broker.Queue, "orders")
		if err != nil {
			t.Fatal(err)
		}
		var want uint64
		for i := 1; i <= 10; i++ {
			if i == 1 || i == 2 || i == 7 {
				continue
			}
			want += 0 // sizes are checked by Check's recount
		}
		if di.Count != 7 || di.NextSeq != 11 || di.Bytes == 0 {
			t.Fatalf("dest: %+v", di)
		}
		ms, err := b.Read(broker.Queue, "orders", 0, 100)
		if err != nil || len(ms) != 7 || ms[0].Seq != 3 {
			t.Fatalf("read all: %d %v", len(ms), err)
		}
		if err := checkStore(b); err != nil {
			t.Fatal(err)
		}
	}
	check(b)
	b = reopen(t, b, fs)
	check(b)
	// Duplicates are still rejected after a restart; the producer audit
	// survives the ack.
	if _, err := b.Send(broker.Queue, "orders", msg("m4", "", 0, "")); !errors.Is(err, broker.ErrDuplicate) {
		t.Fatalf("dup after reopen: %v", err)
	}
	if _, err := b.Send(broker.Queue, "orders", msg("m1x", "p1", 1, "")); !errors.Is(err, broker.ErrDuplicate) {
		t.Fatalf("dup producer after ack and reopen: %v", err)
	}
	if seq := mustSend(t, b, broker.Queue, "orders", msg("m11", "p1", 11, "")); seq != 11 {
		t.Fatalf("seq after reopen %d", seq)
	}
	ds, err := b.Destinations()
	if err != nil || len(ds) != 1 || ds[0].Count != 8 {
		t.Fatalf("destinations %+v %v", ds, err)
	}
	if err := b.Purge(broker.Queue, "orders"); err != nil {
		t.Fatal(err)
	}
	if di, _ := b.Destination(broker.Queue, "orders"); di.Count != 0 || di.Bytes != 0 || di.NextSeq != 12 {
		t.Fatalf("after purge %+v", di)
	}
	if seq := mustSend(t, b, broker.Queue, "orders", msg("m4", "", 0, "")); seq != 12 {
		t.Fatalf("seq after purge %d", seq)
	}
	if err := b.DeleteDestination(broker.Queue, "orders"); err != nil {
		t.Fatal(err)
	}
	if ds, _ := b.Destinations(); len(ds) != 0 {
		t.Fatalf("after delete %+v", ds)
	}
	if seq := mustSend(t, b, broker.Queue, "orders", msg("m4", "p1", 1, "")); seq != 1 {
		t.Fatalf("seq after delete %d", seq)
	}
}

func TestBroker_DurableSubscriptions(t *testing.T) {
	fs := vfs.NewMem()
	b := openBroker(t, fs)
	if seq := mustSend(t, b, broker.Topic, "news", msg("early", "", 0, "nobody listens")); seq != 1 {
		t.Fatal(seq)
	}
	for _, s := range []string{"a", "b"} {
		if err := b.Subscribe("news", s); err != nil {
			t.Fatal(err)
		}
	}
	for i := 2; i <= 5; i++ {
		mustSend(t, b, broker.Topic, "news", msg(fmt.Sprint("n", i), "", 0, "hello"))
	}
	if di, _ := b.Destination(broker.Topic, "news"); di.Count != 4 {
		t.Fatalf("%+v", di)
	}
	if err := b.AckSub("news", "a", 2, 3); err != nil {
		t.Fatal(err)
	}
	if err := b.AckSub("news", "a", 2); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("ack twice: %v", err)
	}
	if n, _ := b.Pending("news", "a"); n != 2 {
		t.Fatalf("pending a %d", n)
	}
	if di, _ := b.Destination(broker.Topic, "news"); di.Count != 4 {
		t.Fatalf("kept until b acks: %+v", di)
	}
	b = reopen(t, b, fs)
	ms, err := b.ReadSub("news", "a", 0, 10)
	if err != nil || len(ms) != 2 || ms[0].Seq != 4 {
		t.Fatalf("readsub a %+v %v", ms, err)
	}
	if err := b.AckSub("news", "b", 2, 3, 4); err != nil {
		t.Fatal(err)
	}
	if di, _ := b.Destination(broker.Topic, "news"); di.Count != 2 {
		t.Fatalf("after both acked: %+v", di)
	}
	if err := b.Unsubscribe("news", "a"); err != nil {
		t.Fatal(err)
	}
	if di, _ := b.Destination(broker.Topic, "news"); di.Count != 1 {
		t.Fatalf("after unsubscribe: %+v", di)
	}
	subs, err := b.Subscriptions("news")
	if err != nil || len(subs) != 1 || subs[0].Name != "b" || subs[0].Pending != 1 {
		t.Fatalf("subs %+v %v", subs, err)
	}
	if _, err := b.Pending("news", "a"); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("pending of deleted sub: %v", err)
	}
	if err := b.Ack(broker.Topic, "news", 5); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("Ack on topic: %v", err)
	}
	if err := b.Purge(broker.Topic, "news"); err != nil {
		t.Fatal(err)
	}
	if n, _ := b.Pending("news", "b"); n != 0 {
		t.Fatalf("pending after purge %d", n)
	}
}

func TestBroker_Transactions(t *testing.T) {
	fs := vfs.NewMem()
	b := openBroker(t, fs)
	mustSend(t, b, broker.Queue, "in", msg("i1", "", 0, "work"))
	tx := b.BeginTx()
	out := msg("o1", "p", 1, "result")
	_ = tx.Send(broker.Queue, "out", out)
	_ = tx.Ack(broker.Queue, "in", 1)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if out.Seq != 1 {
		t.Fatalf("seq %d", out.Seq)
	}
	if di, _ := b.Destination(broker.Queue, "in"); di.Count != 0 {
		t.Fatalf("%+v", di)
	}
	// A failing op rolls the whole commit back.
	tx = b.BeginTx()
	_ = tx.Send(broker.Queue, "out", msg("o2", "", 0, ""))
	_ = tx.Ack(broker.Queue, "in", 1)
	if err := tx.Commit(); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("commit with a bad ack: %v", err)
	}
	if di, _ := b.Destination(broker.Queue, "out"); di.Count != 1 {
		t.Fatalf("partial commit: %+v", di)
	}
	tx = b.BeginTx()
	_ = tx.Send(broker.Queue, "out", msg("o3", "", 0, ""))
	tx.Rollback()
	if err := tx.Commit(); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatal(err)
	}
	// Two-phase.
	tx = b.BeginTx()
	_ = tx.Send(broker.Queue, "out", msg("o4", "", 0, "xa"))
	_ = tx.Ack(broker.Queue, "out", 1)
	if err := tx.Prepare("xid-1"); err != nil {
		t.Fatal(err)
	}
	tx2 := b.BeginTx()
	_ = tx2.Send(broker.Queue, "out", msg("o5", "", 0, "xa2"))
	if err := tx2.Prepare("xid-2"); err != nil {
		t.Fatal(err)
	}
	if di, _ := b.Destination(broker.Queue, "out"); di.Count != 1 {
		t.Fatalf("prepared is not visible: %+v", di)
	}
	// Crash: an image of what is durable now.
	img := fs.CrashClone(vfs.CrashOptions{KeepUnsynced: 0})
	b2 := openBroker(t, img)
	xids, err := b2.Prepared()
	if err != nil || len(xids) != 2 || xids[0] != "xid-1" {
		t.Fatalf("prepared after crash %v %v", xids, err)
	}
	if err := b2.CommitPrepared("xid-1"); err != nil {
		t.Fatal(err)
	}
	if err := b2.RollbackPrepared("xid-2"); err != nil {
		t.Fatal(err)
	}
	if err := b2.CommitPrepared("xid-2"); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatal(err)
	}
	ms, err := b2.Read(broker.Queue, "out", 0, 10)
	if err != nil || len(ms) != 1 || ms[0].ID != "o4" || ms[0].Seq != 2 {
		t.Fatalf("after 2pc %+v %v", ms, err)
	}
	if xids, _ := b2.Prepared(); len(xids) != 0 {
		t.Fatal(xids)
	}
}

func TestBroker_ConcurrentProducers(t *testing.T) {
	fs := vfs.NewMem()
	b := openBroker(t, fs)
	const producers, each = 8, 200
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= each; i++ {
				m := msg(fmt.Sprintf("p%d-%d", p, i), fmt.Sprint("p", p), uint64(i), "payload")
				if _, err := b.Send(broker.Queue, "q", m); err != nil {
					errs <- err
					return
				}
				if i%3 == 0 {
					if err := b.Ack(broker.Queue, "q", m.Seq); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	di, err := b.Destination(broker.Queue, "q")
	if err != nil || di.NextSeq != producers*each+1 || di.Count != producers*(each-each/3) {
		t.Fatalf("%+v %v", di, err)
	}
	if st := b.DB().Stats(); st.Commits >= st.Batches {
		t.Logf("no group commit seen: %d commits for %d batches", st.Commits, st.Batches)
	}
}

// TestBroker_ConcurrentCrash runs producers and consumers on queues and a
// topic concurrently (their batches share fsyncs and are built on each
// other's batches in flight), takes crash images while they run, and
// requires each image to hold every operation acknowledged before it was
// taken, with counts and reference counts that Check's recount agrees with.
func TestBroker_ConcurrentCrash(t *testing.T) {
	fs := vfs.NewMem()
	b := openBroker(t, fs)
	for _, s := range []string{"s1", "s2"} {
		if err := b.Subscribe("t", s); err != nil {
			t.Fatal(err)
		}
	}
	const workers, each = 6, 150
	type acked struct {
		mu    sync.Mutex
		sent  map[string]uint64 // dest/id -> seq, acknowledged sends
		gone  map[string]bool   // dest/seq acked (queue) or by both subs (topic)
		stamp int
	}
	var a acked
	a.sent, a.gone = map[string]uint64{}, map[string]bool{}
	type image struct {
		fs   *vfs.MemFS
		sent map[string]uint64
		gone map[string]bool
	}
	var images []image
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dest, kind := fmt.Sprint("q", w%2), broker.Queue
			if w >= 4 {
				dest, kind = "t", broker.Topic
			}
			for i := 0; i < each; i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				m := msg(id, fmt.Sprint("w", w), uint64(i+1), string(bytes.Repeat([]byte{'b'}, i%200)))
				if _, err := b.Send(kind, dest, m); err != nil {
					errs <- err
					return
				}
				a.mu.Lock()
				a.sent[dest+"/"+id] = m.Seq
				a.mu.Unlock()
				if i%2 == 0 {
					var err error
					if kind == broker.Queue {
						err = b.Ack(kind, dest, m.Seq)
					} else {
						err = b.AckSub(dest, "s1", m.Seq)
						if err == nil {
							err = b.AckSub(dest, "s2", m.Seq)
						}
					}
					if err != nil {
						errs <- err
						return
					}
					a.mu.Lock()
					a.gone[fmt.Sprint(dest, "/", m.Seq)] = true
					a.mu.Unlock()
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
			a.mu.Lock()
			img := image{sent: maps.Clone(a.sent), gone: maps.Clone(a.gone)}
			a.mu.Unlock()
			img.fs = fs.CrashClone(vfs.CrashOptions{KeepUnsynced: 0.5, Seed: int64(len(images))})
			images = append(images, img)
			time.Sleep(5 * time.Millisecond)
		}
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for n, img := range images {
		db2, err := kdb.Open("/db", brokerOpts(img.fs))
		if err != nil {
			t.Fatalf("image %d: %v", n, err)
		}
		b2 := openOn(t, db2)
		if err := checkStore(b2); err != nil {
			t.Fatalf("image %d: check: %v", n, err)
		}
		for k, seq := range img.sent {
			dest, id, _ := strings.Cut(k, "/")
			kind := broker.Queue
			if dest == "t" {
				kind = broker.Topic
			}
			m, err := b2.GetMessage(kind, dest, id)
			switch {
			case img.gone[fmt.Sprint(dest, "/", seq)]:
				if err == nil {
					t.Fatalf("image %d: %s acked but present", n, k)
				}
			case err == nil:
				if m.Seq != seq {
					t.Fatalf("image %d: %s has seq %d, acknowledged as %d", n, k, m.Seq, seq)
				}
			case !errors.Is(err, kdb.ErrNotFound):
				t.Fatalf("image %d: %s: %v", n, k, err)
			default:
				// Missing: only a message whose ack was in flight when
				// the image was taken may be; odd ones are never acked.
				var i int
				fmt.Sscanf(id[strings.Index(id, "-")+1:], "%d", &i)
				if i%2 == 1 {
					t.Fatalf("image %d: never-acked %s lost", n, k)
				}
			}
		}
		if err := db2.Close(); err != nil {
			t.Fatal(err)
		}
	}
	st := b.DB().Stats()
	t.Logf("%d crash images checked; %d commits for %d batches", len(images), st.Commits, st.Batches)
}

// TestBroker_UnsubscribeMany deletes a subscription with more messages
// pending than one batch can ack (small segments).
func TestBroker_UnsubscribeMany(t *testing.T) {
	fs := vfs.NewMem()
	db, err := kdb.Open("/db", &kdb.Options{FS: fs, SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	b := openOn(t, db)
	defer func() {
		if err := checkStore(b); err != nil {
			t.Error(err)
		}
		_ = db.Close()
	}()
	for _, s := range []string{"keep", "drop"} {
		if err := b.Subscribe("t", s); err != nil {
			t.Fatal(err)
		}
	}
	const n = 1000
	for i := range n {
		mustSend(t, b, broker.Topic, "t", msg(fmt.Sprint("m", i), "", 0, "x"))
	}
	if err := b.Unsubscribe("t", "drop"); err != nil {
		t.Fatal(err)
	}
	if p, _ := b.Pending("t", "keep"); p != n {
		t.Fatalf("keep pending %d", p)
	}
	if subs, _ := b.Subscriptions("t"); len(subs) != 1 {
		t.Fatalf("%+v", subs)
	}
	ms, _ := b.ReadSub("t", "keep", 0, 2*n)
	seqs := make([]uint64, len(ms))
	for i, m := range ms {
		seqs[i] = m.Seq
	}
	for len(seqs) > 0 {
		k := min(len(seqs), 50)
		if err := b.AckSub("t", "keep", seqs[:k]...); err != nil {
			t.Fatal(err)
		}
		seqs = seqs[k:]
	}
	if d, _ := b.Destination(broker.Topic, "t"); d.Count != 0 {
		t.Fatalf("%+v", d)
	}
}
