package index

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"testing"

	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

// env is a store on a page file, reopenable on the same file system.
type env struct {
	t   testing.TB
	fs  vfs.FS
	dir string
	ps  int
	pf  *pagefile.File
	s   *Store
}

func newMemEnv(t testing.TB, pageSize int) *env {
	t.Helper()
	e := &env{t: t, fs: vfs.NewMem(), dir: "/db", ps: pageSize}
	e.open()
	t.Cleanup(func() {
		if e.pf != nil {
			_ = e.pf.Close()
		}
	})
	return e
}

func (e *env) open() {
	e.t.Helper()
	pf, _, err := pagefile.Open(e.dir, pagefile.Options{FS: e.fs, PageSize: e.ps})
	if err != nil {
		e.t.Fatalf("pagefile.Open: %v", err)
	}
	s, err := Open(pf, Options{})
	if err != nil {
		_ = pf.Close()
		e.t.Fatalf("index.Open: %v", err)
	}
	e.pf, e.s = pf, s
}

func (e *env) close() {
	e.t.Helper()
	// A free list written by a checkpoint never fails its proof.
	if p := e.pf.FreeListProof(); p.Lies != 0 {
		e.t.Fatalf("the free list lied: %+v", p)
	}
	if err := e.pf.Close(); err != nil {
		e.t.Fatalf("Close: %v", err)
	}
	e.pf, e.s = nil, nil
}

func (e *env) reopen() {
	e.t.Helper()
	e.close()
	e.open()
}

func (e *env) checkpoint() {
	e.t.Helper()
	if err := e.s.Checkpoint(pagefile.MetaUpdate{}); err != nil {
		e.t.Fatalf("Checkpoint: %v", err)
	}
}

func (e *env) check() *CheckReport {
	e.t.Helper()
	rep, err := e.s.Check()
	if err != nil {
		e.t.Fatalf("Check: %v", err)
	}
	return rep
}

func (e *env) update(fn func(tx *Tx) error) {
	e.t.Helper()
	if err := e.s.Update(fn); err != nil {
		e.t.Fatalf("Update: %v", err)
	}
}

func (e *env) view(fn func(tx *Tx) error) {
	e.t.Helper()
	if err := e.s.View(fn); err != nil {
		e.t.Fatalf("View: %v", err)
	}
}

// model is the expected content: tree name -> key -> value.
type model map[string]map[string]string

func (m model) clone() model {
	c := make(model, len(m))
	for name, kv := range m {
		c[name] = make(map[string]string, len(kv))
		for k, v := range kv {
			c[name][k] = v
		}
	}
	return c
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// compare checks that s holds exactly m: tree names, Len, every key and
// value by a forward scan, a backward scan, and Get.
func compare(s *Store, m model) error {
	return s.View(func(tx *Tx) error { return compareTx(tx, m) })
}

// compareTx checks that tx sees exactly m.
func compareTx(tx *Tx, m model) error {
	{
		names, err := tx.Trees()
		if err != nil {
			return err
		}
		want := sortedKeys(m)
		if len(names) != len(want) {
			return fmt.Errorf("trees %q, want %q", names, want)
		}
		for i, name := range want {
			if string(names[i]) != name {
				return fmt.Errorf("tree %d is %q, want %q", i, names[i], name)
			}
			t := tx.Tree([]byte(name))
			if t == nil {
				return fmt.Errorf("tree %q missing", name)
			}
			kv := m[name]
			if t.Len() != uint64(len(kv)) {
				return fmt.Errorf("tree %q: Len %d, want %d", name, t.Len(), len(kv))
			}
			keys := sortedKeys(kv)
			c := t.Cursor()
			j := 0
			for k, v, ok := c.First(); ok; k, v, ok = c.Next() {
				if j >= len(keys) || string(k) != keys[j] || string(v) != kv[keys[j]] {
					return fmt.Errorf("tree %q: forward entry %d is %q (%d bytes), want %q", name, j, k, len(v), keys[min(j, len(keys)-1)])
				}
				j++
			}
			if err := c.Err(); err != nil {
				return err
			}
			if j != len(keys) {
				return fmt.Errorf("tree %q: forward scan saw %d keys, want %d", name, j, len(keys))
			}
			j = len(keys) - 1
			for k, _, ok := c.Last(); ok; k, _, ok = c.Prev() {
				if j < 0 || string(k) != keys[j] {
					return fmt.Errorf("tree %q: backward entry %d is %q", name, j, k)
				}
				j--
			}
			if err := c.Err(); err != nil {
				return err
			}
			if j != -1 {
				return fmt.Errorf("tree %q: backward scan stopped at %d", name, j)
			}
			for _, k := range keys {
				v, ok, err := t.Get([]byte(k))
				if err != nil || !ok || !bytes.Equal(v, []byte(kv[k])) {
					return fmt.Errorf("tree %q: Get(%q) = %d bytes, %v, %v", name, k, len(v), ok, err)
				}
			}
		}
		return nil
	}
}

var errTestRollback = errors.New("test: roll back")
