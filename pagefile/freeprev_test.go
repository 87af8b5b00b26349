package pagefile

import (
	"testing"

	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/vfs"
)

// TestFile_CrashInCheckpointKeepsTrustedFreeList crashes a checkpoint at each
// of its mutating operations, with every unsynced byte dropped or kept: the
// reopen must always trust a db.free file (db.free, or db.free.prev while the
// new meta is not durable), never fall back to the scan, and agree with the
// scan.
func TestFile_CrashInCheckpointKeepsTrustedFreeList(t *testing.T) {
	for _, keep := range []float64{0, 1} {
		for k := 1; ; k++ {
			mem := vfs.NewMem()
			f, _, err := Open("/s", Options{FS: mem})
			if err != nil {
				t.Fatal(err)
			}
			if err := workload(f, 2, 1, nil); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			cr := kdbtest.CrashAt(mem, k, vfs.CrashOptions{KeepUnsynced: keep, Seed: int64(k)})
			f, _, err = Open("/s", Options{FS: cr.FS()})
			if err != nil {
				t.Fatal(err)
			}
			werr := workload(f, 1, 2, nil)
			_ = f.Close()
			img := cr.Image()

			in, err := Inspect(img, "/s")
			if err != nil {
				t.Fatalf("keep=%v k=%d: inspect: %v", keep, k, err)
			}
			got, rep, err := Open("/s", Options{FS: img})
			if err != nil {
				t.Fatalf("keep=%v k=%d: reopen: %v", keep, k, err)
			}
			if rep.FreeListPath != FreeListTrusted {
				t.Errorf("keep=%v k=%d: free list %s (%s), want trusted", keep, k, rep.FreeListPath, rep.Reason)
			}
			if in.TrustedFile != rep.FreeListFile || in.Meta.ID != rep.MetaID {
				t.Errorf("keep=%v k=%d: Inspect says %q at %v, Open took %q at %v", keep, k, in.TrustedFile, in.Meta.ID, rep.FreeListFile, rep.MetaID)
			}
			for _, fi := range in.FreeFiles {
				if fi.Name == in.TrustedFile && (!fi.MatchesMeta || fi.ID != rep.MetaID) {
					t.Errorf("keep=%v k=%d: trusted %s does not match the meta: %v", keep, k, fi.Name, fi)
				}
			}
			trusted := captureState(t, got)
			_ = got.Close()
			scanned, _, err := Open("/s", Options{FS: img.Clone(), ForceScan: true, ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			if d := equalState(captureState(t, scanned), trusted, false); d != "" {
				t.Errorf("keep=%v k=%d: trusted (%s) and scanned differ: %s", keep, k, rep.FreeListFile, d)
			}
			_ = scanned.Close()
			if werr == nil && !cr.Crashed() {
				break // the workload finished before its k-th mutation
			}
		}
	}
}
