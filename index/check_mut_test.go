package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/internal/checksum"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

// firstLeafWithParent is firstLeaf that also returns the leaf's parent.
func firstLeafWithParent(t *testing.T, e *env) (parent *node, leaf *node) {
	t.Helper()
	var id pagefile.PageID
	e.view(func(tx *Tx) error {
		id = tx.Tree([]byte("t")).root
		return nil
	})
	for {
		typ, p, err := e.pf.Read(id)
		if err != nil {
			t.Fatal(err)
		}
		n, err := decodeNode(id, typ, p)
		if err != nil {
			t.Fatal(err)
		}
		if n.leaf {
			return parent, n
		}
		parent, id = n, n.ents[0].child
	}
}

// TestStore_CheckKeyAtUpperBound guards the upper bound of Check's key
// bounds at equality: a leaf key equal to the separator after it belongs to
// the next child (a search for it never reaches this leaf, so the key is
// unreachable by Get, yet cursors return it twice). TestStore_CheckFindsDamage
// only moves a key far past the bound.
func TestStore_CheckKeyAtUpperBound(t *testing.T) {
	e := fillEnv(t)
	parent, leaf := firstLeafWithParent(t, e)
	if parent == nil || len(parent.ents) < 2 {
		t.Fatalf("first leaf has no right sibling")
	}
	sep := parent.ents[1].key
	leaf.ents[len(leaf.ents)-1].key = append([]byte(nil), sep...)
	if err := e.pf.Write(leaf.id, pageLeaf, leaf.encode(make([]byte, e.pf.PayloadSize()))); err != nil {
		t.Fatal(err)
	}
	_, err := e.s.Check()
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "outside its parent's bounds") {
		t.Fatalf("Check = %v, want ErrCorrupt naming a key outside its parent's bounds", err)
	}
}

// TestStore_CheckReachablePageOnTheFreeList guards Check's rule that a page
// is owned exactly once. A db.free that is intact and matches the meta but
// lists a live leaf (a bug, a bad tool, a mixed backup) is trusted at Open
// (proven page by page only before use): Check must name the page as both
// reachable and free. Without the rule the free mark overwrote the
// reachable one and Check passed a free list that would hand a live page to
// the next allocation.
func TestStore_CheckReachablePageOnTheFreeList(t *testing.T) {
	e := fillEnv(t)
	_, leaf := firstLeafWithParent(t, e)
	free := e.pf.FreeRanges()
	e.close()
	if err := addFreePage(e.fs, "/db/db.free", free, leaf.id); err != nil {
		t.Fatal(err)
	}
	e.open()
	if rep := e.pf.FreeListProof(); rep.Unproven == 0 {
		t.Fatalf("the edited db.free was not trusted: %+v", rep)
	}
	_, err := e.s.Check()
	want := fmt.Sprintf("%s is both reachable and free", leaf.id)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Check = %v, want ErrCorrupt naming %q", err, want)
	}
}

// addFreePage rewrites the db.free at name (whose ranges are free) with
// page id added, keeping its header (store ID, checkpoint ID, page count)
// and sealing it with a valid checksum (FORMAT.md §2.5).
func addFreePage(fs vfs.FS, name string, free []pagefile.Range, id pagefile.PageID) error {
	old, err := vfs.ReadFile(fs, name)
	if err != nil {
		return err
	}
	const hdr, rangeSize = 72, 16
	ranges := append(slices.Clone(free), pagefile.Range{Start: id, Len: 1})
	slices.SortFunc(ranges, func(a, b pagefile.Range) int { return int(a.Start) - int(b.Start) })
	var merged []pagefile.Range
	var total uint64
	for _, r := range ranges {
		total += r.Len
		if n := len(merged); n > 0 && merged[n-1].End() >= r.Start {
			merged[n-1].Len = uint64(max(merged[n-1].End(), r.End()) - merged[n-1].Start)
			continue
		}
		merged = append(merged, r)
	}
	b := make([]byte, hdr+rangeSize*len(merged))
	copy(b, old[:hdr])
	binary.LittleEndian.PutUint64(b[56:], uint64(len(merged)))
	binary.LittleEndian.PutUint64(b[64:], total)
	for i, r := range merged {
		binary.LittleEndian.PutUint64(b[hdr+rangeSize*i:], uint64(r.Start))
		binary.LittleEndian.PutUint64(b[hdr+rangeSize*i+8:], r.Len)
	}
	binary.LittleEndian.PutUint64(b[0:], checksum.Sum64(b[8:]))
	return vfs.WriteFileAtomic(fs, name, b, 0o600)
}

// TestStore_OwnsPendingPages guards Owns for pages pending free: pages an
// Update replaced while a View still reads them are the index's until the
// View ends. Recovery frees every damaged page Owns does not return, so a
// pending page left out would be freed (and reallocated) under the View,
// then freed a second time when the View ends.
func TestStore_OwnsPendingPages(t *testing.T) {
	e := fillEnv(t)
	all := func() []pagefile.PageID {
		var ids []pagefile.PageID
		for id := pagefile.FirstDataPage; id < e.pf.PageCount(); id++ {
			ids = append(ids, id)
		}
		return ids
	}
	before, err := e.s.Owns(all())
	if err != nil {
		t.Fatal(err)
	}
	inView, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- e.s.View(func(*Tx) error {
			close(inView)
			<-release
			return nil
		})
	}()
	<-inView
	e.update(func(tx *Tx) error {
		tr, err := tx.OpenTree([]byte("t"))
		if err != nil {
			return err
		}
		for i := 0; i < 300; i += 7 {
			if err := tr.Put(fmt.Appendf(nil, "k%04d", i), []byte("rewritten")); err != nil {
				return err
			}
		}
		return nil
	})
	rep, err := e.s.Check()
	if err != nil || rep.PendingPages == 0 {
		close(release)
		t.Fatalf("no pending pages (%+v, %v)", rep, err)
	}
	after, err := e.s.Owns(all())
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range before {
		if !slices.Contains(after, id) {
			t.Fatalf("%s, replaced while a View reads it (pending free), is not owned", id)
		}
	}
}

// TestStore_CheckKeyBelowLowerBound guards the lower bound of Check's key
// bounds: a key below the separator that leads to its leaf belongs to an
// earlier child, so Get never finds it there, yet cursors return it out of
// order. TestStore_CheckFindsDamage and TestStore_CheckKeyAtUpperBound
// damage only the first leaf, which has no lower bound.
func TestStore_CheckKeyBelowLowerBound(t *testing.T) {
	e := fillEnv(t)
	parent, _ := firstLeafWithParent(t, e)
	if parent == nil || len(parent.ents) < 2 {
		t.Fatalf("first leaf has no right sibling")
	}
	id := parent.ents[1].child
	typ, p, err := e.pf.Read(id)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := decodeNode(id, typ, p)
	if err != nil || !leaf.leaf {
		t.Fatalf("second child %+v, %v", leaf, err)
	}
	leaf.ents[0].key = []byte("a") // below every key of the tree
	if err := e.pf.Write(id, pageLeaf, leaf.encode(make([]byte, e.pf.PayloadSize()))); err != nil {
		t.Fatal(err)
	}
	_, err = e.s.Check()
	want := fmt.Sprintf("%s: key \"a\" outside its parent's bounds", id)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Check = %v, want ErrCorrupt naming %q", err, want)
	}
}

// TestStore_OverlappingCellsAreCorrupt: a leaf whose cells overlap (each
// within the payload, keys in order; here the first cell's value runs to
// the end of the payload, over every other cell) decodes to a node larger
// than its page. The writer re-encodes a node it changed into one page
// buffer: a Delete from that leaf panicked at commit (index out of range),
// and Check, which names such a node too, was the only guard. decodeNode
// refuses it, so the Delete fails with ErrCorrupt and Check names the leaf.
func TestStore_OverlappingCellsAreCorrupt(t *testing.T) {
	e := fillEnv(t)
	_, leaf := firstLeafWithParent(t, e)
	ps := e.pf.PayloadSize()
	b := make([]byte, ps)
	leaf.encode(b)
	off := int(binary.LittleEndian.Uint16(b[nodeHeaderSize:]))
	vlen := ps - off - leafCellHeader - len(leaf.ents[0].key)
	binary.LittleEndian.PutUint32(b[off+offLeafValueLen:], uint32(vlen))
	if err := e.pf.Write(leaf.id, pageLeaf, b); err != nil {
		t.Fatal(err)
	}
	last := leaf.ents[len(leaf.ents)-1].key
	err := e.s.Update(func(tx *Tx) error {
		_, err := tx.Tree([]byte("t")).Delete(last)
		return err
	})
	want := fmt.Sprintf("%s: cells of", leaf.id)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Delete(%q) = %v, want ErrCorrupt naming %q", last, err, want)
	}
	_, err = e.s.Check()
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Check = %v, want ErrCorrupt naming %q", err, want)
	}
}

// TestStore_CheckReadsThePendingChain guards Check's reading of the pages
// of the last checkpoint's pending-free list: the next Open reads them
// (their type, their checksums), so a page of the list that a stray write
// changed must fail Check, not only that Open.
func TestStore_CheckReadsThePendingChain(t *testing.T) {
	e := fillEnv(t)
	_, release := e.s.Pin()
	e.update(func(tx *Tx) error {
		return tx.Tree([]byte("t")).Put([]byte("k0000"), []byte("rewritten"))
	})
	e.checkpoint()
	release()
	if len(e.s.w.chain) == 0 {
		t.Fatal("the checkpoint stored no pending-free list")
	}
	e.check()
	id := e.s.w.chain[0]
	if err := e.pf.Write(id, pageLeaf, (&node{leaf: true}).encode(make([]byte, nodeHeaderSize))); err != nil {
		t.Fatal(err)
	}
	_, err := e.s.Check()
	want := fmt.Sprintf("%s: page type %d, want %d", id, pageLeaf, pagePending)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Check = %v, want ErrCorrupt naming %q", err, want)
	}
}
