package pagefile

import (
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// TestOpen_CreatesItsDirectoryDurably: a new store is durable when Open
// returns, under new parent directories too: a power loss right after must
// not lose the directory (and db.data, db.free with it), which the next
// Open would take for no store and create afresh.
func TestOpen_CreatesItsDirectoryDurably(t *testing.T) {
	for _, dir := range []string{"/db", "/a/b/db"} {
		t.Run(dir, func(t *testing.T) {
			mem := vfs.NewMem()
			f, rep, err := Open(dir, Options{FS: mem})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Created {
				t.Fatal("the first Open did not create the store")
			}
			id := f.Meta().ID
			img := mem.CrashClone(vfs.CrashOptions{}) // a power loss: nothing unsynced kept
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			f2, rep2, err := Open(dir, Options{FS: img})
			if err != nil {
				t.Fatalf("after a power loss: %v", err)
			}
			defer f2.Close()
			if rep2.Created || f2.Meta().ID != id {
				t.Fatalf("after a power loss Open created the store again (created %v, checkpoint %v, want %v): the directory was not durable", rep2.Created, f2.Meta().ID, id)
			}
		})
	}
}
