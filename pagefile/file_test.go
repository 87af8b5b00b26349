package pagefile

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

const testType PageType = 16

func payloadFor(id PageID, ver int, n int) []byte {
	p := make([]byte, n)
	copy(p, fmt.Sprintf("page %d version %d;", id, ver))
	for i := 24; i < n; i++ {
		p[i] = byte(int(id)*31 + ver*7 + i)
	}
	return p
}

func mustOpen(t testing.TB, fsys vfs.FS, opts Options) (*File, *Report) {
	t.Helper()
	opts.FS = fsys
	f, rep, err := Open("/db", opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return f, rep
}

func TestFile_CreateWriteCheckpointReopen(t *testing.T) {
	for _, name := range []string{"mem", "os"} {
		t.Run(name, func(t *testing.T) {
			var fsys vfs.FS = vfs.NewMem()
			dir := "/db"
			if name == "os" {
				fsys, dir = vfs.OS, t.TempDir()
			}
			f, rep, err := Open(dir, Options{FS: fsys, PageSize: 1024})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Created || rep.FreeListPath != FreeListCreated {
				t.Fatalf("report %+v", rep)
			}
			if f.PageSize() != 1024 || f.PayloadSize() != 1024-pageHeaderSize {
				t.Fatalf("sizes %d %d", f.PageSize(), f.PayloadSize())
			}
			first, err := f.AllocateRun(10)
			if err != nil || first != FirstDataPage {
				t.Fatalf("AllocateRun = %v, %v", first, err)
			}
			for id := first; id < first+10; id++ {
				if err := f.Write(id, testType, payloadFor(id, 1, 100+int(id))); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Checkpoint(MetaUpdate{Root: first, ReplaySegment: 7, ReplayOffset: 99, App: []byte("app")}); err != nil {
				t.Fatal(err)
			}
			if f.DirtyCount() != 0 {
				t.Fatalf("dirty %d after checkpoint", f.DirtyCount())
			}
			for id := first; id < first+10; id++ {
				typ, p, err := f.Read(id)
				if err != nil || typ != testType || !bytes.Equal(p, payloadFor(id, 1, 100+int(id))) {
					t.Fatalf("Read(%v) = %v, %q, %v", id, typ, p, err)
				}
			}
			if err := f.Free(first + 3); err != nil {
				t.Fatal(err)
			}
			if err := f.Free(first + 3); !errors.Is(err, ErrDoubleFree) {
				t.Fatalf("double free: %v", err)
			}
			if err := f.Checkpoint(MetaUpdate{Root: first}); err != nil {
				t.Fatal(err)
			}
			m := f.Meta()
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			g, rep, err := Open(dir, Options{FS: fsys})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if rep.FreeListPath != FreeListTrusted || rep.RedoApplied || !strings.Contains(rep.RedoIgnored, "already applied") {
				t.Fatalf("report %+v", rep)
			}
			if gm := g.Meta(); gm.ID != m.ID || gm.Root != first || gm.PageCount != uint64(first+10) {
				t.Fatalf("meta %+v want %+v", gm, m)
			}
			if got := g.FreeRanges(); len(got) != 1 || got[0] != (Range{first + 3, 1}) {
				t.Fatalf("free %v", got)
			}
			typ, _, err := g.Read(first + 3)
			if err != nil || typ != PageFree {
				t.Fatalf("freed page: %v %v", typ, err)
			}
			g2, rep2, err := Open(dir, Options{FS: fsys, ForceScan: true, ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer g2.Close()
			if rep2.FreeListPath != FreeListScanned || rep2.Reason != "forced" || rep2.PagesScanned != 10 {
				t.Fatalf("report %+v", rep2)
			}
			if got := g2.FreeRanges(); len(got) != 1 || got[0] != (Range{first + 3, 1}) {
				t.Fatalf("free %v", got)
			}
		})
	}
}
