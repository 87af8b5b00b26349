package journal

import (
	"os"
	"sync"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// wbFS records the StartWriteback calls of its files.
type wbFS struct {
	vfs.FS
	mu    sync.Mutex
	calls [][2]int64
}

type wbFile struct {
	vfs.File
	fs *wbFS
}

func (f *wbFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &wbFile{File: file, fs: f}, nil
}

func (f *wbFile) StartWriteback(off, n int64) error {
	f.fs.mu.Lock()
	f.fs.calls = append(f.fs.calls, [2]int64{off, n})
	f.fs.mu.Unlock()
	return nil
}

// Under SyncAlways each batch's write starts the write-back of exactly the
// bytes it wrote (so that the device works while the caller prepares its
// SyncTo), on a file that can; on the OS, a Linux file can. Under the
// other policies, where no fdatasync follows each write, it does not.
func TestWrite_StartsWriteback(t *testing.T) {
	lazy := &wbFS{FS: vfs.NewMem()}
	jl, _, err := Open("/j", Options{FS: lazy, Sync: SyncInterval})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := jl.Write(Record{Type: 1, Payload: make([]byte, 100)}); err != nil {
		t.Fatal(err)
	}
	jl.Close()
	if len(lazy.calls) != 0 {
		t.Fatalf("under SyncInterval a write started write-back %d times", len(lazy.calls))
	}
	fs := &wbFS{FS: vfs.NewMem()}
	j, _, err := Open("/j", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	before := j.Tail()
	for i := range 3 {
		_, end, err := j.Write(Record{Type: 1, Payload: make([]byte, 100*(i+1))})
		if err != nil {
			t.Fatal(err)
		}
		fs.mu.Lock()
		last := fs.calls[len(fs.calls)-1]
		fs.mu.Unlock()
		if last != [2]int64{before.Offset, end.Offset - before.Offset} {
			t.Fatalf("write %d: write-back started for [%d, +%d), want [%d, +%d)", i, last[0], last[1], before.Offset, end.Offset-before.Offset)
		}
		before = end
	}
}
