package pagefile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// TestInspect_HugeFreeFileIsNotRead: a db.free (or db.free.prev) whose
// size is far beyond what any free list of the store could need (a
// damaged size, a sparse file) is reported, not read whole into memory.
// Open bounds it by the page count (loadFreeFile); Inspect, which
// kdbtool inspect and check run, read it whole: a 40 GiB sparse db.free
// made both die with "fatal error: runtime: out of memory".
func TestInspect_HugeFreeFileIsNotRead(t *testing.T) {
	dir := t.TempDir()
	f, _, err := Open(dir, Options{FS: vfs.OS})
	if err != nil {
		t.Fatal(err)
	}
	if err := workload(f, 2, 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{freeFileName, freeFileName + prevSuffix} {
		p := filepath.Join(dir, name)
		if err := os.Truncate(p, 1<<40); err != nil {
			t.Skipf("no sparse 1 TiB file here: %v", err)
		}
	}
	in, err := Inspect(vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, fi := range in.FreeFiles {
		if fi.Intact || !strings.Contains(fi.Err, "exceeds") {
			t.Errorf("%s: intact %v, err %q: want it reported too large", fi.Name, fi.Intact, fi.Err)
		}
	}
}
