package dbtest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/kdb-project/kdb"
)

// StepKind says what a workload step does.
type StepKind int

const (
	StepWrite      StepKind = iota // a batch through DB.Write
	StepUpdate                     // a read-modify-write through DB.Update
	StepCheckpoint                 // DB.Checkpoint
)

// Op is one write of a step.
type Op struct {
	Index     string
	Key       string
	Value     []byte
	Delete    bool
	DropIndex bool
}

// Step is one call the workload makes.
type Step struct {
	Kind StepKind
	Ops  []Op // StepWrite
}

// State is the content of a store: index -> key -> value.
type State map[string]map[string][]byte

// Clone returns a deep copy (values are shared: they are never mutated).
func (s State) Clone() State {
	c := make(State, len(s))
	for idx, m := range s {
		cm := make(map[string][]byte, len(m))
		for k, v := range m {
			cm[k] = v
		}
		c[idx] = cm
	}
	return c
}

// Equal reports whether s and o hold the same keys and values. Empty indexes
// count as absent.
func (s State) Equal(o State) bool {
	return s.Diff(o) == ""
}

// Diff describes the first difference between s (got) and o (want), or "".
func (s State) Diff(o State) string {
	idx := map[string]bool{}
	for i := range s {
		idx[i] = true
	}
	for i := range o {
		idx[i] = true
	}
	names := make([]string, 0, len(idx))
	for i := range idx {
		names = append(names, i)
	}
	sort.Strings(names)
	for _, i := range names {
		a, b := s[i], o[i]
		if len(a) != len(b) {
			return fmt.Sprintf("index %q: %d keys, want %d", i, len(a), len(b))
		}
		for k, v := range a {
			w, ok := b[k]
			if !ok {
				return fmt.Sprintf("index %q: key %q present, want absent", i, k)
			}
			if !bytes.Equal(v, w) {
				return fmt.Sprintf("index %q: key %q: %d bytes, want %d", i, k, len(v), len(w))
			}
		}
	}
	return ""
}

// Apply returns the state after step (s is not modified).
func (s State) Apply(st Step) State {
	switch st.Kind {
	case StepCheckpoint:
		return s
	case StepUpdate:
		n := s.Clone()
		m := n["a"]
		if m == nil {
			m = map[string][]byte{}
			n["a"] = m
		}
		m["counter"] = binary.LittleEndian.AppendUint64(nil, counter(m["counter"])+1)
		return n
	}
	n := s.Clone()
	for _, op := range st.Ops {
		switch {
		case op.DropIndex:
			delete(n, op.Index)
		case op.Delete:
			delete(n[op.Index], op.Key)
		default:
			if n[op.Index] == nil {
				n[op.Index] = map[string][]byte{}
			}
			n[op.Index][op.Key] = op.Value
		}
	}
	return n
}

func counter(v []byte) uint64 {
	if len(v) != 8 {
		return 0
	}
	return binary.LittleEndian.Uint64(v)
}

// Workload returns n deterministic steps: batches of puts (values below and
// above the journal threshold), overwrites and deletes over a small key
// space, read-modify-write Updates, index drops, and checkpoints.
func Workload(seed uint64, n int) []Step {
	rng := rand.New(rand.NewPCG(seed, 0x6b6462))
	steps := make([]Step, 0, n)
	for len(steps) < n {
		r := rng.IntN(100)
		switch {
		case r < 6:
			steps = append(steps, Step{Kind: StepCheckpoint})
		case r < 12:
			steps = append(steps, Step{Kind: StepUpdate})
		case r < 15:
			steps = append(steps, Step{Kind: StepWrite, Ops: []Op{{Index: "tmp", DropIndex: true}}})
		default:
			nops := 1 + rng.IntN(4)
			var ops []Op
			for range nops {
				idx := []string{"a", "b", "tmp"}[rng.IntN(3)]
				key := fmt.Sprintf("k%03d", rng.IntN(40))
				if rng.IntN(100) < 20 {
					ops = append(ops, Op{Index: idx, Key: key, Delete: true})
					continue
				}
				size := rng.IntN(200)
				if rng.IntN(100) < 35 {
					size = 600 + rng.IntN(6000)
				}
				v := make([]byte, size)
				for i := range v {
					v[i] = byte(rng.Uint32())
				}
				ops = append(ops, Op{Index: idx, Key: key, Value: v})
			}
			steps = append(steps, Step{Kind: StepWrite, Ops: ops})
		}
	}
	return steps
}

// Models returns the state before each step and after the last:
// Models(steps)[i] is the state after steps[:i].
func Models(steps []Step) []State {
	out := make([]State, 0, len(steps)+1)
	s := State{}
	out = append(out, s)
	for _, st := range steps {
		s = s.Apply(st)
		out = append(out, s)
	}
	return out
}

// Exec runs one step against db.
func Exec(db *kdb.DB, st Step) error {
	switch st.Kind {
	case StepCheckpoint:
		return db.Checkpoint()
	case StepUpdate:
		return db.Update(func(tx *kdb.Txn) error {
			v, err := tx.Get("a", []byte("counter"))
			if err != nil && !errors.Is(err, kdb.ErrNotFound) {
				return err
			}
			return tx.Put("a", []byte("counter"), binary.LittleEndian.AppendUint64(nil, counter(v)+1))
		})
	}
	b := kdb.NewBatch()
	for _, op := range st.Ops {
		switch {
		case op.DropIndex:
			b.DropIndex(op.Index)
		case op.Delete:
			b.Delete(op.Index, []byte(op.Key))
		default:
			b.Put(op.Index, []byte(op.Key), op.Value)
		}
	}
	return db.Write(b)
}

// Dump reads the whole content of db.
func Dump(db *kdb.DB) (State, error) {
	s := State{}
	err := db.View(func(sn *kdb.Snapshot) error {
		names, err := sn.Indexes()
		if err != nil {
			return err
		}
		for _, idx := range names {
			m := map[string][]byte{}
			it := sn.Iter(idx)
			for ok := it.First(); ok; ok = it.Next() {
				v := it.Value()
				if it.Err() != nil {
					break
				}
				m[string(it.Key())] = slices.Clone(v)
			}
			if err := it.Err(); err != nil {
				return fmt.Errorf("index %q: %w", idx, err)
			}
			if len(m) > 0 {
				s[idx] = m
			}
		}
		return nil
	})
	return s, err
}
