package pagefile

import (
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// openReadStore creates a store on the OS FS with n checkpointed pages and
// m more written but not checkpointed.
func openReadStore(tb testing.TB, n, m int) *File {
	tb.Helper()
	f, _, err := Open(tb.TempDir(), Options{FS: vfs.OS, UnsafeNoSync: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = f.Close() })
	first, err := f.AllocateRun(n + m)
	if err != nil {
		tb.Fatal(err)
	}
	for id := first; id < first+PageID(n); id++ {
		if err := f.Write(id, testType, selfPayload(id, 1, 1000)); err != nil {
			tb.Fatal(err)
		}
	}
	for id := first + PageID(n); id < first+PageID(n+m); id++ { // written after the checkpoint below
		if err := f.Write(id, testType, selfPayload(id, 0, 1000)); err != nil {
			tb.Fatal(err)
		}
	}
	if err := f.Checkpoint(MetaUpdate{}); err != nil {
		tb.Fatal(err)
	}
	for id := first + PageID(n); id < first+PageID(n+m); id++ {
		if err := f.Write(id, testType, selfPayload(id, 2, 1000)); err != nil {
			tb.Fatal(err)
		}
	}
	return f
}

// TestFile_ReadCleanPageDoesNotAllocate: a clean page is a slice of the
// mapping, verified once.
func TestFile_ReadCleanPageDoesNotAllocate(t *testing.T) {
	f := openReadStore(t, 100, 0)
	id := FirstDataPage + 42
	allocs := testing.AllocsPerRun(1000, func() {
		_, p, err := f.Read(id)
		if err != nil || !checkSelfPayload(id, p) {
			t.Fatalf("Read: %v", err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Read of a clean page allocates %.1f times", allocs)
	}
	if f.mu.view.mm == nil {
		t.Fatal("the OS FS was not mapped")
	}
}

// BenchmarkRead reads random pages: clean ones (slices of the mapping,
// checksum verified on first read only) and dirty ones (from the cache).
func BenchmarkRead(b *testing.B) {
	const n = 10000
	for _, mode := range []string{"clean", "dirty"} {
		b.Run("page="+mode, func(b *testing.B) {
			f := openReadStore(b, n, n)
			base := FirstDataPage
			if mode == "dirty" {
				base += n
			}
			i := 0
			for b.Loop() {
				id := base + PageID((i*7919)%n)
				i++
				if _, _, err := f.Read(id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestView_VerifiedBitmap(t *testing.T) {
	const ps = 512
	mm := make([]byte, (2*verifyChunkPages+10)*ps)
	v := newView(mm, ps)
	ids := []PageID{0, 63, 64, verifyChunkPages - 1, verifyChunkPages, 2*verifyChunkPages + 9}
	for _, id := range ids {
		if v.isVerified(id) {
			t.Fatalf("%v verified before set", id)
		}
		v.setVerified(id)
	}
	for _, id := range ids {
		if !v.isVerified(id) || v.isVerified(id+1) && !containsID(ids, id+1) {
			t.Fatalf("%v: bit wrong after set", id)
		}
	}
	v.clearVerified(64)
	if v.isVerified(64) || !v.isVerified(63) {
		t.Fatal("clear touched the wrong bit")
	}
	// Beyond the mapping: ignored, never verified.
	far := PageID(3*verifyChunkPages + 5)
	v.setVerified(far)
	v.clearVerified(far)
	if v.isVerified(far) {
		t.Fatal("a page beyond the mapping reads as verified")
	}
}

func containsID(ids []PageID, id PageID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
