package index

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/kdb-project/kdb/pagefile"
)

var update = flag.Bool("update", false, "rewrite testdata/format/*.golden")

func TestNode_EncodeDecodeRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		n    *node
	}{
		{"empty leaf", &node{leaf: true}},
		{"leaf inline", &node{leaf: true, ents: []entry{
			{key: []byte{}, val: []byte("empty key")},
			{key: []byte("a"), val: []byte{}},
			{key: []byte("b"), val: []byte("value b")},
		}}},
		{"leaf overflow", &node{leaf: true, ents: []entry{
			{key: []byte("a"), val: []byte("x")},
			{key: []byte("big"), ovf: 77, vlen: 123456},
		}}},
		{"branch", &node{ents: []entry{
			{child: 5},
			{key: []byte("m"), child: 9},
			{key: []byte("t"), child: 4},
		}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			buf := tc.n.encode(make([]byte, 512))
			if len(buf) != tc.n.size() {
				t.Fatalf("encoded %d bytes, size() %d", len(buf), tc.n.size())
			}
			got, err := decodeNode(7, tc.n.typ(), buf)
			if err != nil {
				t.Fatal(err)
			}
			if got.leaf != tc.n.leaf || len(got.ents) != len(tc.n.ents) {
				t.Fatalf("got %+v", got)
			}
			for i := range got.ents {
				g, w := got.ents[i], tc.n.ents[i]
				if !bytes.Equal(g.key, w.key) || !bytes.Equal(g.val, w.val) || g.ovf != w.ovf || g.child != w.child || (w.ovf != 0 && g.vlen != w.vlen) {
					t.Fatalf("entry %d: got %+v want %+v", i, g, w)
				}
			}
			// The page accessors agree with the decoder.
			r := ref{pg: nodePage{id: 7, p: buf, leaf: tc.n.leaf}, cnt: len(tc.n.ents)}
			for i := range tc.n.ents {
				k, err := r.key(i)
				if err != nil || !bytes.Equal(k, got.ents[i].key) && (tc.n.leaf || i > 0) {
					t.Fatalf("key(%d) = %q, %v", i, k, err)
				}
			}
		})
	}
}

func TestNode_DecodeRejectsDamage(t *testing.T) {
	good := &node{leaf: true, ents: []entry{{key: []byte("a"), val: []byte("1")}, {key: []byte("b"), val: []byte("2")}}}
	enc := func() []byte { return good.encode(make([]byte, 64)) }
	tests := []struct {
		name   string
		typ    pagefile.PageType
		damage func(b []byte) []byte
	}{
		{"short", pageLeaf, func(b []byte) []byte { return b[:2] }},
		{"count too big", pageLeaf, func(b []byte) []byte { b[0], b[1] = 0xff, 0x7f; return b }},
		{"slot beyond payload", pageLeaf, func(b []byte) []byte { b[4], b[5] = 0xff, 0xff; return b }},
		{"key length beyond payload", pageLeaf, func(b []byte) []byte { b[8], b[9] = 0xff, 0; return b }},
		{"unknown value kind", pageLeaf, func(b []byte) []byte { b[10] = 9; return b }},
		{"keys out of order", pageLeaf, func(b []byte) []byte { b[15] = 'z'; return b }},
		{"wrong page type", pageOverflow, func(b []byte) []byte { return b }},
		{"branch without children", pageBranch, func(b []byte) []byte { clear(b); return b }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeNode(3, tc.typ, tc.damage(enc()))
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeNode = %v, want ErrCorrupt", err)
			}
		})
	}
}

// FuzzDecodeNode: arbitrary page bytes never panic the decoder or the page
// accessors that Get and cursors use; every error is ErrCorrupt.
func FuzzDecodeNode(f *testing.F) {
	f.Add(true, (&node{leaf: true, ents: []entry{{key: []byte("a"), val: []byte("1")}, {key: []byte("b"), ovf: 9, vlen: 5000}}}).encode(make([]byte, 80)))
	f.Add(false, (&node{ents: []entry{{child: 3}, {key: []byte("k"), child: 4}}}).encode(make([]byte, 40)))
	f.Add(true, []byte{})
	f.Add(false, []byte{1, 0, 0, 0, 4, 0})
	f.Fuzz(func(t *testing.T, leaf bool, b []byte) {
		typ := pageBranch
		if leaf {
			typ = pageLeaf
		}
		if _, err := decodeNode(3, typ, b); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decodeNode: %v", err)
		}
		pg := nodePage{id: 3, p: b, leaf: leaf}
		cnt, err := pg.count()
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatal(err)
			}
			return
		}
		r := ref{pg: pg, cnt: cnt}
		for i := range cnt {
			if _, err := r.key(i); err != nil && !errors.Is(err, ErrCorrupt) {
				t.Fatal(err)
			}
			if leaf {
				if _, _, _, err := r.value(i); err != nil && !errors.Is(err, ErrCorrupt) {
					t.Fatal(err)
				}
			} else if _, err := r.child(i); err != nil && !errors.Is(err, ErrCorrupt) {
				t.Fatal(err)
			}
		}
		if leaf {
			_, _, err = r.searchLeaf([]byte("k"))
		} else if cnt > 0 {
			_, err = r.searchBranch([]byte("k"))
		}
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatal(err)
		}
	})
}

// TestFormat_Golden pins the bytes of the index page formats
// (FORMAT.md §3). Regenerate with go test ./index -run Golden -update.
func TestFormat_Golden(t *testing.T) {
	e := newMemEnv(t, 512)
	e.update(func(tx *Tx) error {
		tr, err := tx.CreateTree([]byte("tree"))
		if err != nil {
			return err
		}
		if err := tr.Put([]byte("k1"), []byte("v1")); err != nil {
			return err
		}
		return tr.Put([]byte("k2"), bytes.Repeat([]byte{0xab}, 600))
	})
	e.checkpoint()
	pages := map[string]pagefile.PageID{}
	var leaf pagefile.PageID
	e.view(func(tx *Tx) error {
		pages["catalog-leaf"] = tx.catalog
		leaf = tx.Tree([]byte("tree")).root
		return nil
	})
	pages["leaf"] = leaf
	pages["root"] = e.pf.Meta().Root
	_, p, err := e.pf.Read(leaf)
	if err != nil {
		t.Fatal(err)
	}
	n, err := decodeNode(leaf, pageLeaf, p)
	if err != nil {
		t.Fatal(err)
	}
	pages["overflow-1"] = n.ents[1].ovf
	_, ov, err := e.pf.Read(n.ents[1].ovf)
	if err != nil {
		t.Fatal(err)
	}
	pages["overflow-2"] = pagefile.PageID(ov[offChainNext]) // small page IDs
	branch := &node{ents: []entry{{child: 5}, {key: []byte("m"), child: 9}}}
	for name, id := range pages {
		typ, b, err := e.pf.Read(id)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checkGolden(t, name, append([]byte{byte(typ)}, b...))
	}
	checkGolden(t, "branch", append([]byte{byte(pageBranch)}, branch.encode(make([]byte, 32))...))
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "format", name+".golden")
	dump := []byte(hex.Dump(got))
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, dump, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if !bytes.Equal(dump, want) {
		t.Errorf("%s differs from %s:\n%s", name, path, dump)
	}
}
