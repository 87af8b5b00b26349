package pagefile

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/vfs"
)

// A ReadOnly handle tells a page rewritten by a later checkpoint (ErrStale),
// and a damaged page while the store changed (ErrStale), from a damaged page
// while nothing changed (ErrCorrupt); it never returns bytes of a newer
// checkpoint.
func TestFile_ReadOnlyDetectsLiveCheckpoints(t *testing.T) {
	for _, name := range []string{"mem", "os"} {
		t.Run(name, func(t *testing.T) {
			var fsys vfs.FS = vfs.NewMem()
			dir := "/db"
			if name == "os" {
				fsys, dir = vfs.OS, t.TempDir()
			}
			w, _, err := Open(dir, Options{FS: fsys})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			var ids []PageID
			for i := 0; i < 4; i++ {
				id, err := w.Allocate()
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Write(id, PageType(16), []byte{'v', 1, byte(i)}); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			if err := w.Checkpoint(MetaUpdate{}); err != nil {
				t.Fatal(err)
			}
			ro := func() *File {
				r, _, err := Open(dir, Options{FS: fsys, ReadOnly: true})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { r.Close() })
				return r
			}
			r1 := ro()
			if _, p, err := r1.Read(ids[0]); err != nil || !bytes.Equal(p, []byte{'v', 1, 0}) {
				t.Fatalf("read before any change: %q, %v", p, err)
			}
			if r1.Changed() {
				t.Fatal("Changed with no checkpoint")
			}

			// The writer rewrites ids[0] and ids[1] in place at its next
			// checkpoint.
			for _, id := range ids[:2] {
				if err := w.Write(id, PageType(16), []byte{'v', 2, byte(id)}); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Checkpoint(MetaUpdate{}); err != nil {
				t.Fatal(err)
			}
			if !r1.Changed() {
				t.Error("Changed is false after a checkpoint")
			}
			if _, p, err := r1.Read(ids[1]); !errors.Is(err, ErrStale) || errors.Is(err, ErrCorrupt) {
				t.Errorf("read of a page a later checkpoint rewrote: %q, %v; want ErrStale", p, err)
			}
			// A page read before keeps the snapshot's bytes (a verified copy).
			if _, p, err := r1.Read(ids[0]); err != nil || !bytes.Equal(p, []byte{'v', 1, 0}) {
				t.Errorf("read again of a page read before the rewrite: %q, %v", p, err)
			}

			// Damage while nothing changes is damage.
			r2 := ro()
			data := filepath.Join(dir, dataFileName)
			off := int64(ids[2])*int64(w.PageSize()) + pageHeaderSize
			if err := kdbtest.FlipBit(fsys, data, off, 3); err != nil {
				t.Fatal(err)
			}
			if _, _, err := r2.Read(ids[2]); !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrStale) {
				t.Errorf("damaged page, store unchanged: %v; want ErrCorrupt", err)
			}
			// The same bytes while a checkpoint ran since the open: stale.
			if err := w.Write(ids[3], PageType(16), []byte{'v', 2, 3}); err != nil {
				t.Fatal(err)
			}
			if err := w.Checkpoint(MetaUpdate{}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := r2.Read(ids[2]); !errors.Is(err, ErrStale) || errors.Is(err, ErrCorrupt) {
				t.Errorf("damaged-looking page after a checkpoint: %v; want ErrStale", err)
			}
		})
	}
}

// ReadState changes at each step of a checkpoint that precedes the in-place
// writes, and not otherwise.
func TestReadState_ChangesWithCheckpoints(t *testing.T) {
	mem := vfs.NewMem()
	w, _, err := Open("/db", Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s0, err := ReadState(mem, "/db")
	if err != nil {
		t.Fatal(err)
	}
	id, _ := w.Allocate()
	if err := w.Write(id, PageType(16), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if s, _ := ReadState(mem, "/db"); s != s0 {
		t.Error("State changed without a checkpoint")
	}
	if err := w.Checkpoint(MetaUpdate{}); err != nil {
		t.Fatal(err)
	}
	s1, _ := ReadState(mem, "/db")
	if s1 == s0 || s1.Slots == s0.Slots || s1.RedoHead == s0.RedoHead {
		t.Errorf("State after a checkpoint: %+v, before %+v", s1, s0)
	}
}
