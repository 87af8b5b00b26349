package pagefile

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kdb-project/kdb/vfs"
)

// bulkBuild builds a valid store of size bytes in dir quickly: it creates
// the store, writes every data page (valid header and checksum; type 16,
// with 64 evenly spread runs of 16 pages stamped PageFree) into db.data
// with large sequential writes, then hands the page count and the matching
// free list to a File and takes a normal checkpoint, so db.free, db.redo and
// the meta are written by the real code. Then it takes one small churn
// checkpoint (frees, allocations, rewrites), dirties a few more pages and
// closes without checkpointing: the state a crash after the last
// checkpoint leaves.
func bulkBuild(tb testing.TB, dir string, size int64) {
	tb.Helper()
	const ps = 4096
	f, _, err := Open(dir, Options{FS: vfs.OS, PageSize: ps})
	if err != nil {
		tb.Fatal(err)
	}
	n := PageID(size / ps)
	free := newFreeList()
	stride := (n - FirstDataPage) / 64
	for i := PageID(0); i < 64; i++ {
		if err := free.freeRange(Range{FirstDataPage + i*stride + stride/2, 16}); err != nil {
			tb.Fatal(err)
		}
	}
	data, err := vfs.OS.OpenFile(filepath.Join(dir, dataFileName), os.O_RDWR, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	const chunkPages = 2048 // 8 MiB writes
	buf := make([]byte, chunkPages*ps)
	payload := make([]byte, 200)
	for id := FirstDataPage; id < n; id += chunkPages {
		k := min(chunkPages, n-id)
		for j := PageID(0); j < k; j++ {
			pid := id + j
			img := buf[j*ps : (j+1)*ps]
			if free.contains(pid) {
				encodePage(img, pid, PageFree, nil, 1)
				continue
			}
			copy(payload, fmt.Sprintf("bulk page %d", pid))
			encodePage(img, pid, 16, payload, 1)
		}
		if _, err := data.WriteAt(buf[:k*ps], int64(id)*ps); err != nil {
			tb.Fatal(err)
		}
	}
	if err := data.Sync(); err != nil {
		tb.Fatal(err)
	}
	if err := data.Close(); err != nil {
		tb.Fatal(err)
	}
	// Adopt the pages: the File was opened on the empty store.
	f.commitMu.Lock()
	f.dataSize = int64(n) * ps
	f.commitMu.Unlock()
	f.mu.Lock()
	f.mu.pageCount = n
	f.mu.free = free
	f.mu.Unlock()
	if err := f.Checkpoint(MetaUpdate{}); err != nil {
		tb.Fatal(err)
	}
	// Churn, and pages dirtied after the last checkpoint.
	for round := 0; round < 2; round++ {
		for i := 0; i < 100; i++ {
			id := FirstDataPage + PageID(i*7+round)
			if typ, _, err := f.Read(id); err != nil || typ == PageFree {
				continue
			}
			if err := f.Free(id); err != nil {
				tb.Fatal(err)
			}
		}
		for i := 0; i < 150; i++ {
			id, err := f.Allocate()
			if err != nil {
				tb.Fatal(err)
			}
			if err := f.Write(id, 17, payload); err != nil {
				tb.Fatal(err)
			}
		}
		if round == 0 {
			if err := f.Checkpoint(MetaUpdate{Root: FirstDataPage + 1}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := f.Close(); err != nil { // no checkpoint: the second round is lost, as in a crash
		tb.Fatal(err)
	}
}

// unmarkRedo clears the applied mark of dir's db.redo.
func unmarkRedo(tb testing.TB, dir string) {
	tb.Helper()
	name := filepath.Join(dir, redoFileName)
	size, _, err := vfs.OS.Stat(name)
	if err != nil {
		tb.Fatal(err)
	}
	r, err := vfs.OS.OpenFile(name, os.O_RDWR, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := r.WriteAt(make([]byte, 4), size-redoTrailerSize+trailerApplied); err != nil {
		tb.Fatal(err)
	}
	if err := r.Close(); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkReopen times Open after a crash of stores of 256 MiB, 1 GiB and
// 4 GiB (4 KiB pages, on the OS file system, page cache warm), trusting
// db.free and with a forced scan of every page header, after a crash
// between checkpoints; free=trusted-redo: after a crash before the last
// checkpoint's db.redo was marked applied (its ~250-page batch is checked
// and re-applied). Only Open is timed.
// Metrics: pages-scanned (per Open), free-list-ms (the free-list phase),
// redo-ms (reading and re-applying the last db.redo batch, with its sync).
func BenchmarkReopen(b *testing.B) {
	sizes := []struct {
		name string
		size int64
	}{{"256MiB", 256 << 20}, {"1GiB", 1 << 30}, {"4GiB", 4 << 30}}
	for _, sz := range sizes {
		b.Run("size="+sz.name, func(b *testing.B) {
			dir := b.TempDir()
			start := time.Now()
			bulkBuild(b, dir, sz.size)
			b.Logf("built %s in %v", sz.name, time.Since(start).Round(time.Millisecond))
			for _, mode := range []string{"trusted", "scan", "trusted-redo"} {
				if mode == "trusted-redo" {
					// As if the crash hit before the last checkpoint's
					// db.redo was marked applied: Open re-checks and
					// re-applies its batch.
					unmarkRedo(b, dir)
				}
				b.Run("free="+mode, func(b *testing.B) {
					var scanned uint64
					var freeList, redo time.Duration
					for b.Loop() {
						f, rep, err := Open(dir, Options{FS: vfs.OS, ForceScan: mode == "scan"})
						if err != nil {
							b.Fatal(err)
						}
						if (mode == "trusted-redo") != rep.RedoApplied {
							b.Fatalf("redo applied %v in mode %s (%s)", rep.RedoApplied, mode, rep.RedoIgnored)
						}
						if mode == "scan" && rep.PagesScanned != uint64(sz.size/4096)-uint64(FirstDataPage) {
							b.Fatalf("scanned %d pages", rep.PagesScanned)
						}
						want := FreeListTrusted
						if mode == "scan" {
							want = FreeListScanned
						}
						if rep.FreeListPath != want {
							b.Fatalf("free list %s (%s), want %s", rep.FreeListPath, rep.Reason, want)
						}
						scanned += rep.PagesScanned
						freeList += rep.FreeListDuration
						redo += rep.RedoDuration
						b.StopTimer()
						if err := f.Close(); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
					b.ReportMetric(float64(scanned)/float64(b.N), "pages-scanned")
					b.ReportMetric(float64(freeList.Microseconds())/1000/float64(b.N), "free-list-ms")
					b.ReportMetric(float64(redo.Microseconds())/1000/float64(b.N), "redo-ms")
				})
			}
		})
	}
}

// BenchmarkAllocateLoaded measures Allocate plus Write of one page taken
// from a free list of 16,384 pages: loaded from db.free (free=trusted:
// each page is proven free on disk first, one page read and checksum
// through the mapping, page cache warm) or rebuilt by a scan
// (free=scan: no proof needed). The difference is the cost of the proof.
// Every 16,384 operations the File is reopened without a checkpoint (not
// timed), so that the list is loaded again.
func BenchmarkAllocateLoaded(b *testing.B) {
	const ps, freePages = 4096, 16384
	dir := b.TempDir()
	f, _, err := Open(dir, Options{FS: vfs.OS, PageSize: ps})
	if err != nil {
		b.Fatal(err)
	}
	first, err := f.AllocateRun(freePages + 64)
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 200)
	for id := first; id < first+freePages+64; id++ {
		if err := f.Write(id, 16, payload); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Checkpoint(MetaUpdate{Root: first}); err != nil {
		b.Fatal(err)
	}
	for id := first + 64; id < first+freePages+64; id++ {
		if err := f.Free(id); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Checkpoint(MetaUpdate{Root: first}); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"trusted", "scan"} {
		b.Run("free="+mode, func(b *testing.B) {
			var f *File
			reopen := func() {
				if f != nil {
					if err := f.Close(); err != nil {
						b.Fatal(err)
					}
				}
				var rep *Report
				f, rep, err = Open(dir, Options{FS: vfs.OS, ForceScan: mode == "scan"})
				if err != nil {
					b.Fatal(err)
				}
				if rep.FreePages != freePages {
					b.Fatalf("report %+v", rep)
				}
			}
			reopen()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i > 0 && i%freePages == 0 {
					b.StopTimer()
					reopen()
					b.StartTimer()
				}
				id, err := f.Allocate()
				if err != nil {
					b.Fatal(err)
				}
				if err := f.Write(id, 17, payload); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if p := f.FreeListProof(); p.Lies != 0 || (mode == "trusted") != (p.Proven > 0) {
				b.Fatalf("proof %+v", p)
			}
			if err := f.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
