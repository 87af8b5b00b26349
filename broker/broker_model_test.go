package broker_test

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
	"github.com/kdb-project/kdb/vfs"
)

// A simple in-memory broker with the store's documented semantics.
type mMsg struct {
	id, body string
	pid      string
	pseq     uint64
}

type mDest struct {
	next uint64
	msgs map[uint64]mMsg
	ids  map[string]uint64
	prod map[string]uint64
	subs map[string]map[uint64]bool // topic: sub -> pending seqs
	refs map[uint64]int
}

type mBroker struct {
	dests    map[string]*mDest // kind byte + name
	prepared map[string][]mOp
}

type mOp struct {
	kind      int // 1 send, 2 ack, 3 acksub
	dk        broker.DestKind
	dest, sub string
	m         mMsg
	seqs      []uint64
}

func newModel() *mBroker {
	return &mBroker{dests: map[string]*mDest{}, prepared: map[string][]mOp{}}
}

func (b *mBroker) clone() *mBroker {
	c := newModel()
	for k, d := range b.dests {
		nd := &mDest{next: d.next, msgs: maps.Clone(d.msgs), ids: maps.Clone(d.ids), prod: maps.Clone(d.prod),
			subs: map[string]map[uint64]bool{}, refs: maps.Clone(d.refs)}
		for s, p := range d.subs {
			nd.subs[s] = maps.Clone(p)
		}
		c.dests[k] = nd
	}
	for k, v := range b.prepared {
		c.prepared[k] = v
	}
	return c
}

func dk(kind broker.DestKind, name string) string { return string(rune('0'+kind)) + name }

func (b *mBroker) dest(kind broker.DestKind, name string, create bool) *mDest {
	d := b.dests[dk(kind, name)]
	if d == nil && create {
		d = &mDest{next: 1, msgs: map[uint64]mMsg{}, ids: map[string]uint64{}, prod: map[string]uint64{},
			subs: map[string]map[uint64]bool{}, refs: map[uint64]int{}}
		b.dests[dk(kind, name)] = d
	}
	return d
}

func (b *mBroker) apply(o mOp) (uint64, error) {
	switch o.kind {
	case 1:
		d := b.dest(o.dk, o.dest, true)
		if o.m.pid != "" {
			if last, ok := d.prod[o.m.pid]; ok && o.m.pseq <= last {
				return 0, broker.ErrDuplicate
			}
		}
		if _, ok := d.ids[o.m.id]; ok {
			return 0, broker.ErrDuplicate
		}
		seq := d.next
		d.next++
		if o.m.pid != "" {
			d.prod[o.m.pid] = o.m.pseq
		}
		n := 1
		if o.dk == broker.Topic {
			n = len(d.subs)
			if n == 0 {
				return seq, nil
			}
			for _, p := range d.subs {
				p[seq] = true
			}
		}
		d.msgs[seq], d.ids[o.m.id], d.refs[seq] = o.m, seq, n
		return seq, nil
	case 2:
		if o.dk != broker.Queue {
			return 0, kdb.ErrInvalid
		}
		d := b.dest(o.dk, o.dest, false)
		if d == nil {
			return 0, kdb.ErrNotFound
		}
		for _, s := range o.seqs {
			if _, ok := d.msgs[s]; !ok {
				return 0, kdb.ErrNotFound
			}
			d.unref(s)
		}
	case 3:
		d := b.dest(broker.Topic, o.dest, false)
		if d == nil || d.subs[o.sub] == nil {
			return 0, kdb.ErrNotFound
		}
		for _, s := range o.seqs {
			if !d.subs[o.sub][s] {
				return 0, kdb.ErrNotFound
			}
			delete(d.subs[o.sub], s)
			d.unref(s)
		}
	}
	return 0, nil
}

func (d *mDest) unref(s uint64) {
	if d.refs[s]--; d.refs[s] == 0 {
		delete(d.ids, d.msgs[s].id)
		delete(d.msgs, s)
		delete(d.refs, s)
	}
}

// applyTx applies ops atomically: on error b is unchanged.
func (b *mBroker) applyTx(ops []mOp) (*mBroker, error) {
	c := b.clone()
	for _, o := range ops {
		if _, err := c.apply(o); err != nil {
			return b, err
		}
	}
	return c, nil
}

func (o mOp) message() *broker.Message {
	return &broker.Message{ID: o.m.id, ProducerID: o.m.pid, ProducerSeq: o.m.pseq, Body: []byte(o.m.body),
		Properties: map[string]string{"k": o.m.id}}
}

func execOp(bk *broker.Broker, o mOp) (uint64, error) {
	switch o.kind {
	case 1:
		return bk.Send(o.dk, o.dest, o.message())
	case 2:
		return 0, bk.Ack(o.dk, o.dest, o.seqs...)
	default:
		return 0, bk.AckSub(o.dest, o.sub, o.seqs...)
	}
}

func addTxOp(tx *broker.Tx, o mOp) {
	switch o.kind {
	case 1:
		_ = tx.Send(o.dk, o.dest, o.message())
	case 2:
		_ = tx.Ack(o.dk, o.dest, o.seqs...)
	default:
		_ = tx.AckSub(o.dest, o.sub, o.seqs...)
	}
}

// compare requires the store to hold exactly the model's state.
func compare(bk *broker.Broker, b *mBroker) error {
	ds, err := bk.Destinations()
	if err != nil {
		return err
	}
	if len(ds) != len(b.dests) {
		return fmt.Errorf("%d destinations, model %d", len(ds), len(b.dests))
	}
	for _, di := range ds {
		d := b.dests[dk(di.Kind, di.Name)]
		if d == nil {
			return fmt.Errorf("destination %s %q not in the model", di.Kind, di.Name)
		}
		if di.Count != uint64(len(d.msgs)) || di.NextSeq != d.next {
			return fmt.Errorf("%s %q: count %d next %d, model %d %d", di.Kind, di.Name, di.Count, di.NextSeq, len(d.msgs), d.next)
		}
		ms, err := bk.Read(di.Kind, di.Name, 0, 1<<30)
		if err != nil {
			return err
		}
		seqs := slices.Sorted(maps.Keys(d.msgs))
		if len(ms) != len(seqs) {
			return fmt.Errorf("%s %q: read %d messages, model %d", di.Kind, di.Name, len(ms), len(seqs))
		}
		for i, m := range ms {
			w := d.msgs[seqs[i]]
			if m.Seq != seqs[i] || m.ID != w.id || string(m.Body) != w.body || m.ProducerID != w.pid || m.ProducerSeq != w.pseq || m.Properties["k"] != w.id {
				return fmt.Errorf("%s %q: message %d is %+v, model seq %d %+v", di.Kind, di.Name, i, m, seqs[i], w)
			}
		}
		if di.Kind == broker.Topic {
			subs, err := bk.Subscriptions(di.Name)
			if err != nil {
				return err
			}
			if len(subs) != len(d.subs) {
				return fmt.Errorf("topic %q: %d subscriptions, model %d", di.Name, len(subs), len(d.subs))
			}
			for _, s := range subs {
				p, ok := d.subs[s.Name]
				if !ok || s.Pending != uint64(len(p)) {
					return fmt.Errorf("topic %q sub %q: pending %d, model %d (%v)", di.Name, s.Name, s.Pending, len(p), ok)
				}
				ms, err := bk.ReadSub(di.Name, s.Name, 0, 1<<30)
				if err != nil {
					return err
				}
				want := slices.Sorted(maps.Keys(p))
				for i, m := range ms {
					if m.Seq != want[i] {
						return fmt.Errorf("topic %q sub %q: pending[%d] = %d, model %d", di.Name, s.Name, i, m.Seq, want[i])
					}
				}
			}
		}
	}
	xids, err := bk.Prepared()
	if err != nil {
		return err
	}
	if !slices.Equal(xids, slices.Sorted(maps.Keys(b.prepared))) {
		return fmt.Errorf("prepared %v, model %v", xids, slices.Sorted(maps.Keys(b.prepared)))
	}
	if err := checkStore(bk); err != nil {
		return err
	}
	return nil
}

func errClass(err error) error {
	for _, s := range []error{broker.ErrDuplicate, kdb.ErrNotFound, kdb.ErrInvalid} {
		if errors.Is(err, s) {
			return s
		}
	}
	return err
}

// TestBroker_Model runs random broker operations against the store and the
// model, and every few steps takes a crash image of the store (losing
// whatever was not synced), opens it, requires it to equal the model (every
// acknowledged operation, nothing else) and goes on with it.
func TestBroker_Model(t *testing.T) {
	seeds, steps := 4, 1500
	if testing.Short() {
		seeds, steps = 2, 500
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { runModel(t, uint64(seed), steps) })
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 99))
	fs := vfs.NewMem()
	db, err := kdb.Open("/db", brokerOpts(fs))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	bk := openOn(t, db)
	model := newModel()
	queues, topics, subs := []string{"q1", "q2", "q3"}, []string{"t1", "t2"}, []string{"s1", "s2", "s3"}
	pseq := map[string]uint64{}
	nextID := 0
	randSeq := func(kind broker.DestKind, name string) uint64 {
		d := model.dests[dk(kind, name)]
		if d == nil || len(d.msgs) == 0 || rng.IntN(10) == 0 {
			return uint64(rng.IntN(50))
		}
		keys := slices.Sorted(maps.Keys(d.msgs))
		return keys[rng.IntN(len(keys))]
	}
	randOp := func() mOp {
		switch r := rng.IntN(10); {
		case r < 5:
			o := mOp{kind: 1, dk: broker.Queue, dest: queues[rng.IntN(len(queues))]}
			if rng.IntN(3) == 0 {
				o.dk, o.dest = broker.Topic, topics[rng.IntN(len(topics))]
			}
			nextID++
			o.m.id = fmt.Sprint("id", nextID)
			if rng.IntN(15) == 0 && nextID > 2 {
				o.m.id = fmt.Sprint("id", rng.IntN(nextID-1)+1) // maybe a duplicate
			}
			if rng.IntN(4) > 0 {
				o.m.pid = fmt.Sprint("p", rng.IntN(3))
				pseq[o.m.pid]++
				o.m.pseq = pseq[o.m.pid]
				if rng.IntN(15) == 0 {
					o.m.pseq -= uint64(rng.IntN(3)) // a resend
				}
			}
			o.m.body = strings.Repeat(string(rune('a'+rng.IntN(26))), rng.IntN(300))
			return o
		case r < 8:
			q := queues[rng.IntN(len(queues))]
			return mOp{kind: 2, dk: broker.Queue, dest: q, seqs: []uint64{randSeq(broker.Queue, q)}}
		default:
			tp, s := topics[rng.IntN(len(topics))], subs[rng.IntN(len(subs))]
			o := mOp{kind: 3, dk: broker.Topic, dest: tp, sub: s, seqs: []uint64{uint64(rng.IntN(40))}}
			if d := model.dests[dk(broker.Topic, tp)]; d != nil && len(d.subs[s]) > 0 && rng.IntN(5) > 0 {
				p := slices.Sorted(maps.Keys(d.subs[s]))
				o.seqs = []uint64{p[0]}
			}
			return o
		}
	}
	xid, recoveries, inflights := 0, 0, 0
	outcome := map[string]int{}
	for step := 0; step < steps; step++ {
		var err, want error
		switch r := rng.IntN(100); {
		case r < 70:
			o := randOp()
			var seq, wseq uint64
			wseq, want = model.clone().apply(o)
			seq, err = execOp(bk, o)
			if errClass(err) == errClass(want) && err == nil {
				model.apply(o)
				if o.kind == 1 && seq != wseq {
					t.Fatalf("step %d: seq %d, model %d", step, seq, wseq)
				}
			}
		case r < 78:
			tx := bk.BeginTx()
			var ops []mOp
			for range 1 + rng.IntN(3) {
				o := randOp()
				ops = append(ops, o)
				addTxOp(tx, o)
			}
			var next *mBroker
			next, want = model.applyTx(ops)
			if rng.IntN(4) == 0 {
				tx.Rollback()
				want = nil
			} else if err = tx.Commit(); err == nil {
				model = next
			}
		case r < 82:
			tx := bk.BeginTx()
			var ops []mOp
			for range 1 + rng.IntN(3) {
				o := randOp()
				ops = append(ops, o)
				addTxOp(tx, o)
			}
			xid++
			id := fmt.Sprint("x", xid)
			_, want = model.applyTx(ops)
			if err = tx.Prepare(id); err == nil {
				model.prepared[id] = ops
			}
		case r < 86:
			if len(model.prepared) == 0 {
				continue
			}
			ids := slices.Sorted(maps.Keys(model.prepared))
			id := ids[rng.IntN(len(ids))]
			if rng.IntN(2) == 0 {
				err = bk.RollbackPrepared(id)
				if err == nil {
					delete(model.prepared, id)
				}
			} else {
				var next *mBroker
				next, want = model.applyTx(model.prepared[id])
				if err = bk.CommitPrepared(id); err == nil {
					model = next
					delete(model.prepared, id)
				}
			}
		case r < 92:
			tp, s := topics[rng.IntN(len(topics))], subs[rng.IntN(len(subs))]
			if rng.IntN(3) > 0 {
				err = bk.Subscribe(tp, s)
				d := model.dest(broker.Topic, tp, true)
				if err == nil && d.subs[s] == nil {
					d.subs[s] = map[uint64]bool{}
				}
			} else {
				err = bk.Unsubscribe(tp, s)
				d := model.dest(broker.Topic, tp, false)
				if d == nil || d.subs[s] == nil {
					want = kdb.ErrNotFound
				} else if err == nil {
					for seq := range d.subs[s] {
						d.unref(seq)
					}
					delete(d.subs, s)
				}
			}
		case r < 95:
			kind, name := broker.Queue, queues[rng.IntN(len(queues))]
			if rng.IntN(2) == 0 {
				kind, name = broker.Topic, topics[rng.IntN(len(topics))]
			}
			d := model.dest(kind, name, false)
			if d == nil {
				want = kdb.ErrNotFound
			}
			if rng.IntN(3) > 0 {
				if err = bk.Purge(kind, name); err == nil {
					clear(d.msgs)
					clear(d.ids)
					clear(d.refs)
					for _, p := range d.subs {
						clear(p)
					}
				}
			} else {
				// A prepared transaction acking in it holds it.
				for _, ops := range model.prepared {
					for _, o := range ops {
						if d != nil && o.kind != 1 && o.dk == kind && o.dest == name {
							want = kdb.ErrInvalid
						}
					}
				}
				if err = bk.DeleteDestination(kind, name); err == nil {
					delete(model.dests, dk(kind, name))
				}
			}
		default:
			// A crash image (or a clean reopen) with the store compared to
			// the model.
			inflight := false
			before, after := model, model
			if rng.IntN(4) == 0 {
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			} else if rng.IntN(2) == 0 {
				// Crash while an operation is in flight: the image holds it
				// wholly or not at all.
				o := randOp()
				after = model.clone()
				_, want := after.apply(o)
				done := make(chan error, 1)
				go func() { _, err := execOp(bk, o); done <- err }()
				for range rng.IntN(3) {
					runtime.Gosched()
				}
				img := fs.CrashClone(vfs.CrashOptions{KeepUnsynced: rng.Float64(), Seed: int64(step)})
				if err := <-done; errClass(err) != errClass(want) {
					t.Fatalf("step %d: in-flight send: %v, model %v", step, err, want)
				}
				_ = db.Close()
				fs, inflight = img, true
			} else {
				fs = fs.CrashClone(vfs.CrashOptions{KeepUnsynced: rng.Float64(), Seed: int64(step)})
				_ = db.Close()
			}
			if db, err = kdb.Open("/db", brokerOpts(fs)); err != nil {
				t.Fatalf("step %d: reopen: %v", step, err)
			}
			bk = openOn(t, db)
			if err := compare(bk, before); err != nil {
				if !inflight {
					t.Fatalf("step %d: after recovery: %v", step, err)
				}
				if err2 := compare(bk, after); err2 != nil {
					t.Fatalf("step %d: after recovery, neither before (%v) nor after (%v) the operation in flight", step, err, err2)
				}
				model = after
				inflights++
			}
			recoveries++
			continue
		}
		if errClass(err) != errClass(want) {
			t.Fatalf("step %d: error %v, model %v", step, err, want)
		}
		outcome[fmt.Sprint(errClass(err))]++
	}
	t.Logf("outcomes %v, %d recoveries (%d kept the operation in flight)", outcome, recoveries, inflights)
	if err := compare(bk, model); err != nil {
		t.Fatalf("end: %v", err)
	}
}
