package kdb_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/kdb-project/kdb"
)

// Damage whose checksums hold (here a branch cell made to point at the
// same child as the cell before it, the page's checksum recomputed: a bad
// tool, a bug) made Export read keys out of order and miss a leaf, and end
// "ok" with a file Import refused ("key ... after ..."). Export now refuses
// it, as Import would, naming the tree.
func TestExport_RefusesAnIndexOutOfOrder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	db, err := kdb.Open(dir, &kdb.Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	b := kdb.NewBatch()
	for i := range n {
		b.Put("t", fmt.Appendf(nil, "key-%06d", i), bytes.Repeat([]byte("v"), 40))
	}
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := exportAll(t, dir); err != nil {
		t.Fatalf("Export of the intact store: %v", err)
	}

	forgeWidestBranch(t, dir, func(pg []byte, cell func(int) int) {
		copy(pg[cell(2):cell(2)+8], pg[cell(1):cell(1)+8])
	})

	keys, err := exportAll(t, dir)
	if !errors.Is(err, kdb.ErrCorrupt) || !strings.Contains(err.Error(), `tree "`) {
		t.Fatalf("Export of an index out of order: %d keys, %v; want ErrCorrupt naming the tree", keys, err)
	}
}

// TestExport_RefusesATreeShorterThanItsCount: a branch whose last cell is
// dropped (its cell count lowered by one, the checksum recomputed) hides a
// whole child: the keys read stay in order, but fewer than the tree's
// count. Export refuses it (it ended ok with a snapshot missing them).
func TestExport_RefusesATreeShorterThanItsCount(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	db, err := kdb.Open(dir, &kdb.Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	b := kdb.NewBatch()
	for i := range 3000 {
		b.Put("t", fmt.Appendf(nil, "key-%06d", i), bytes.Repeat([]byte("v"), 40))
	}
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	forgeWidestBranch(t, dir, func(pg []byte, _ func(int) int) {
		n := binary.LittleEndian.Uint16(pg[32:])
		binary.LittleEndian.PutUint16(pg[32:], n-1)
	})
	keys, err := exportAll(t, dir)
	if !errors.Is(err, kdb.ErrCorrupt) || !strings.Contains(err.Error(), "its count says 3000") {
		t.Fatalf("Export of a tree missing a child: %d keys, %v; want ErrCorrupt saying the count", keys, err)
	}
}

// forgeWidestBranch rewrites, with forge, the branch page of db.data with
// the most cells (the root of the test's tree: FORMAT.md §2.4, §3.2,
// §3.4: the page header, then n, flags, the slots; a branch cell starts
// with its child's page ID) and recomputes its checksum.
func forgeWidestBranch(t *testing.T, dir string, forge func(pg []byte, cell func(int) int)) {
	t.Helper()
	path := filepath.Join(dir, "db.data")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const ps, hdr = 4096, 32
	best, bestN := -1, 0
	for p := 3; (p+1)*ps <= len(data); p++ {
		pg := data[p*ps : (p+1)*ps]
		if pg[16] != 16 { // branch
			continue
		}
		if c := int(binary.LittleEndian.Uint16(pg[hdr:])); c > bestN {
			best, bestN = p, c
		}
	}
	if bestN < 3 {
		t.Fatalf("no branch of 3 or more cells in db.data (best %d cells)", bestN)
	}
	pg := data[best*ps : (best+1)*ps]
	forge(pg, func(i int) int { return hdr + int(binary.LittleEndian.Uint16(pg[hdr+4+2*i:])) })
	binary.LittleEndian.PutUint64(pg[0:8], xxhash.Sum64(pg[8:]))
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func exportAll(t *testing.T, dir string) (uint64, error) {
	t.Helper()
	db, err := kdb.Open(dir, &kdb.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var buf bytes.Buffer
	rep, err := db.Export(&buf)
	if rep == nil {
		return 0, err
	}
	return rep.Keys, err
}
