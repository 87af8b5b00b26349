package kdb_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
)

// TestClose_UnmapsDataFile: Close with no View running unmaps db.data and
// closes it; 20 Open/Close cycles left 20 mappings (the descriptors were
// closed by the garbage collector, so a count of open files missed it).
func TestClose_UnmapsDataFile(t *testing.T) {
	dir := t.TempDir()
	for range 20 {
		db, err := kdb.Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Put("a", []byte("k"), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip(err)
	}
	if n := strings.Count(string(maps), filepath.Join(dir, "db.data")); n > 0 {
		t.Fatalf("%d mappings of db.data after 20 Open/Close cycles (no View running)", n)
	}
}
