package kdb_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/kdb-project/kdb"
)

// TestSnapshot_Namespaces lists the namespaces that hold an index, from a
// View of any namespace, committed or still in the mem tables, and not
// the user indexes nor the engine's trees.
func TestSnapshot_Namespaces(t *testing.T) {
	db, err := kdb.Open(filepath.Join(t.TempDir(), "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Put("users", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"mq", "b", "b1", "raft"} {
		n, err := db.Namespace(ns)
		if err != nil {
			t.Fatal(err)
		}
		b := n.NewBatch()
		b.Put("ix", []byte("k"), []byte("v"))
		b.Put("iy", []byte("k"), []byte("v"))
		if err := db.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"b", "b1", "mq", "raft"}
	check := func(when string) {
		t.Helper()
		mq, _ := db.Namespace("mq")
		for _, view := range []func(func(*kdb.Snapshot) error) error{db.View, mq.View} {
			if err := view(func(s *kdb.Snapshot) error {
				got, err := s.Namespaces()
				if err != nil {
					return err
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s: Namespaces %v, want %v", when, got, want)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	check("in the mem tables")
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	check("checkpointed")
}
