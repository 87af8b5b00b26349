package pagefile

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/vfs"
)

func TestFile_DamagedPage(t *testing.T) {
	for _, name := range []string{"mem", "os"} {
		t.Run(name, func(t *testing.T) {
			var fsys vfs.FS = vfs.NewMem()
			dir := "/db"
			if name == "os" {
				fsys, dir = vfs.OS, t.TempDir()
			}
			opts := Options{FS: fsys, PageSize: 512}
			f, _, err := Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			first, err := f.AllocateRun(8)
			if err != nil {
				t.Fatal(err)
			}
			for id := first; id < first+8; id++ {
				if err := f.Write(id, testType, payloadFor(id, 1, 64)); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Checkpoint(MetaUpdate{}); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			bad := first + 5
			off := int64(bad)*512 + 100
			if err := kdbtest.FlipBit(fsys, dir+"/db.data", off, 3); err != nil {
				t.Fatal(err)
			}
			if err := fsys.Remove(dir + "/db.redo"); err != nil { // else Open repairs the page
				t.Fatal(err)
			}
			// Trusted path: Open succeeds, Read of the page fails, others read.
			f, _, err = Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2; i++ { // twice: the failure is not cached as verified
				_, _, err = f.Read(bad)
				want := fmt.Sprintf("@%d: %v: checksum mismatch", int64(bad)*512, bad)
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
					t.Fatalf("Read(%v) = %v, want ErrCorrupt naming %q", bad, err, want)
				}
			}
			if _, p, err := f.Read(bad - 1); err != nil || string(p) != string(payloadFor(bad-1, 1, 64)) {
				t.Fatalf("Read(%v) = %q, %v", bad-1, p, err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			// Scan path: Open lists the page as damaged, leaves it off the
			// free list (neither known free nor in use: the caller decides,
			// as recovery does by what its index reaches), and a Read of it
			// still fails.
			f, rep, err := Open(dir, Options{FS: fsys, ForceScan: true})
			if err != nil {
				t.Fatalf("scan Open: %v", err)
			}
			if len(rep.Damaged) != 1 || rep.Damaged[0].ID != bad || !errors.Is(rep.Damaged[0].Err, ErrCorrupt) ||
				!strings.Contains(rep.Damaged[0].Err.Error(), bad.String()) {
				t.Fatalf("scan Open: Damaged %+v, want page %v", rep.Damaged, bad)
			}
			for _, r := range f.FreeRanges() {
				if bad >= r.Start && bad < r.Start+PageID(r.Len) {
					t.Fatalf("damaged page %v on the free list %v", bad, r)
				}
			}
			if _, _, err := f.Read(bad); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Read(%v) after a scan = %v, want ErrCorrupt", bad, err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			// Past maxDamaged pages the scan gives up, naming the first.
			for id := first; id < first+8; id++ {
				if err := kdbtest.FlipBit(fsys, dir+"/db.data", int64(id)*512+200, 1); err != nil {
					t.Fatal(err)
				}
			}
			saved := maxDamaged
			maxDamaged = 4
			defer func() { maxDamaged = saved }()
			if _, _, err := Open(dir, Options{FS: fsys, ForceScan: true}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), first.String()) {
				t.Fatalf("scan Open with 8 damaged pages (max 4) = %v, want ErrCorrupt naming %v", err, first)
			}
		})
	}
}

func TestFile_MetaSlots(t *testing.T) {
	mem := newBase(t, crashTestOpts, 5) // checkpoint 1 in slot 1, 0 in slot 0
	f, _ := mustOpen(t, mem, crashTestOpts)
	if err := workload(f, 1, 1, nil); err != nil { // checkpoint 2 in slot 0
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	ps := int64(crashTestOpts.PageSize)
	tests := []struct {
		name     string
		damage   func(fsys *vfs.MemFS) error
		wantSeq  uint64
		wantRedo bool
		wantErr  error
	}{
		{"intact: db.redo marked applied, not read", func(*vfs.MemFS) error { return nil }, 2, false, nil},
		{"newest slot damaged, redo repairs it", func(fsys *vfs.MemFS) error {
			return kdbtest.FlipBit(fsys, "/db/db.data", metaSlotPage*ps+metaSeq, 1)
		}, 2, true, nil},
		// The older slot would win, but checkpoint 2 rewrote a page in
		// use at checkpoint 1 in place, and no db.redo says which: opened
		// at 1, the store would read a page of 2 (it used to).
		{"newest slot damaged, no redo: refused", func(fsys *vfs.MemFS) error {
			if err := fsys.Remove("/db/db.redo"); err != nil {
				return err
			}
			return kdbtest.FlipBit(fsys, "/db/db.data", metaSlotPage*ps+metaPageCount, 1)
		}, 0, false, ErrCorrupt},
		{"older slot damaged", func(fsys *vfs.MemFS) error {
			return kdbtest.ZeroRange(fsys, "/db/db.data", (metaSlotPage+1)*ps, ps)
		}, 2, false, nil},
		{"applied mark lost: re-applied", func(fsys *vfs.MemFS) error {
			size, _, err := fsys.Stat("/db/db.redo")
			if err != nil {
				return err
			}
			return kdbtest.ZeroRange(fsys, "/db/db.redo", size-redoTrailerSize+trailerApplied, 4)
		}, 2, true, nil},
		{"both damaged, no redo", func(fsys *vfs.MemFS) error {
			if err := fsys.Remove("/db/db.redo"); err != nil {
				return err
			}
			return kdbtest.ZeroRange(fsys, "/db/db.data", metaSlotPage*ps, 2*ps)
		}, 0, false, ErrCorrupt},
		{"unknown version", func(fsys *vfs.MemFS) error {
			return kdbtest.FlipBit(fsys, "/db/db.data", hdrVersion, 4)
		}, 0, false, ErrVersionMismatch},
		{"header checksum", func(fsys *vfs.MemFS) error {
			return kdbtest.FlipBit(fsys, "/db/db.data", hdrStoreID, 4)
		}, 0, false, ErrCorrupt},
		{"redo torn: ignored", func(fsys *vfs.MemFS) error {
			return kdbtest.FlipBit(fsys, "/db/db.redo", redoHeaderSize+8+100, 0)
		}, 2, false, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fsys := mem.Clone()
			if err := tc.damage(fsys); err != nil {
				t.Fatal(err)
			}
			f, rep, err := Open("/db", Options{FS: fsys})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Open = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if rep.MetaSeq != tc.wantSeq || f.Meta().Seq != tc.wantSeq || rep.RedoApplied != tc.wantRedo || int(rep.MetaSeq%2) != rep.MetaSlot {
				t.Fatalf("report %+v, want seq %d redo %v", rep, tc.wantSeq, tc.wantRedo)
			}
		})
	}
}

func TestFile_MutationErrors(t *testing.T) {
	mem := vfs.NewMem()
	f, _ := mustOpen(t, mem, Options{PageSize: 512})
	id, err := f.Allocate()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Checkpoint(MetaUpdate{}); err == nil || !strings.Contains(err.Error(), "never written") {
		t.Fatalf("checkpoint with an unwritten page: %v", err)
	}
	if _, _, err := f.Read(id); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("Read of an unwritten page: %v", err)
	}
	if err := f.Write(id, testType, make([]byte, f.PayloadSize()+1)); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("oversized write: %v", err)
	}
	if err := f.Write(id+1, testType, nil); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("write beyond the page count: %v", err)
	}
	if err := f.Write(id, PageFree, nil); err == nil {
		t.Fatal("Write of PageFree accepted")
	}
	if err := f.Write(id, testType, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.Free(id); err != nil {
		t.Fatal(err)
	}
	if err := f.Write(id, testType, nil); err == nil {
		t.Fatal("write of a free page accepted")
	}
	if err := f.Free(id); !errors.Is(err, ErrDoubleFree) {
		t.Fatalf("double free: %v", err)
	}
	if err := f.Free(2); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("free of a meta page: %v", err)
	}
	if _, err := f.PrepareCheckpoint(MetaUpdate{App: make([]byte, MaxAppMeta+1)}); err == nil {
		t.Fatal("oversized App accepted")
	}
	if err := f.Checkpoint(MetaUpdate{App: make([]byte, MaxAppMeta)}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Read(id); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	if _, err := f.Allocate(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Allocate after Close: %v", err)
	}
	before := mem.Clone()
	r, _ := mustOpen(t, mem, Options{ReadOnly: true})
	defer r.Close()
	// Read-only: pages change in memory only; checkpoints are refused.
	rid, err := r.Allocate()
	if err != nil {
		t.Fatalf("Allocate read-only: %v", err)
	}
	if err := r.Write(rid, testType, []byte("in memory")); err != nil {
		t.Fatalf("Write read-only: %v", err)
	}
	if typ, p, err := r.Read(rid); err != nil || typ != testType || string(p) != "in memory" {
		t.Fatalf("Read back read-only: %v %q %v", typ, p, err)
	}
	if err := r.Checkpoint(MetaUpdate{}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Checkpoint read-only: %v", err)
	}
	for _, name := range []string{"/db/db.data", "/db/db.redo", "/db/db.free"} {
		a, errA := vfs.ReadFile(mem, name)
		b, errB := vfs.ReadFile(before, name)
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Fatalf("read-only handle changed %s", name)
		}
	}
	if len(r.Meta().App) != MaxAppMeta {
		t.Fatalf("App of %d bytes", len(r.Meta().App))
	}
}

// TestFile_ReadOnlyOverlaysRedo: db.data as before a checkpoint's in-place
// writes, with that checkpoint's db.redo complete. ReadOnly shows the new
// checkpoint without writing; read-write applies it.
func TestFile_ReadOnlyOverlaysRedo(t *testing.T) {
	mem := newBase(t, crashTestOpts, 10)
	if err := kdbtest.CopyFile(mem, "/db/db.data", "/db/data.before"); err != nil {
		t.Fatal(err)
	}
	f, _ := mustOpen(t, mem, crashTestOpts)
	if err := workload(f, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	want := captureState(t, f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := mem.Rename("/db/data.before", "/db/db.data"); err != nil {
		t.Fatal(err)
	}
	before, err := vfs.ReadFile(mem, "/db/db.data")
	if err != nil {
		t.Fatal(err)
	}
	for _, scan := range []bool{false, true} {
		r, rep, err := Open("/db", Options{FS: mem, ReadOnly: true, ForceScan: scan})
		if err != nil {
			t.Fatal(err)
		}
		if d := equalState(captureState(t, r), want, true); d != "" || !rep.RedoApplied {
			t.Fatalf("read-only (scan %v): %s, report %+v", scan, d, rep)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	after, err := vfs.ReadFile(mem, "/db/db.data")
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Fatal("a read-only Open wrote db.data")
	}
	w, rep, err := Open("/db", Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	if d := equalState(captureState(t, w), want, true); d != "" || !rep.RedoApplied || rep.FreeListPath != FreeListTrusted {
		t.Fatalf("read-write: %s, report %+v", d, rep)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// The applying Open synced db.data and marked db.redo applied (the
	// mark is not synced: after a power loss the batch may be re-applied).
	for _, fsys := range []*vfs.MemFS{mem, mem.CrashClone(vfs.CrashOptions{})} {
		w, rep, err = Open("/db", Options{FS: fsys})
		if err != nil {
			t.Fatal(err)
		}
		if d := equalState(captureState(t, w), want, true); d != "" || (fsys == mem && rep.RedoApplied) {
			t.Fatalf("after the applying Open: %s, report %+v", d, rep)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
