package journal

import (
	"errors"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// TestOpen_StraySegmentIsNamed: a file that looks like a later segment (a
// copy of the journal's only segment saved as db-7.log, or random bytes
// at db-2.log) makes the real last segment an unsealed one before another.
// The error blamed db-1.log alone ("segment ends without a seal, and a
// later segment exists"), and an operator had no way to tell the stray
// file from a lost seal. Now it names the later file and says to move it
// out if it is not the store's.
func TestOpen_StraySegmentIsNamed(t *testing.T) {
	for _, stray := range []string{"db-7.log", "db-2.log"} {
		mem := vfs.NewMem()
		j, _ := openMem(t, mem, Options{})
		for b := 0; b < 5; b++ {
			if _, err := j.Append(Record{Type: 1, Payload: payload(b, 0, 100)}); err != nil {
				t.Fatal(err)
			}
		}
		mustClose(t, j)
		data, err := vfs.ReadFile(mem, testDir+"/db-1.log")
		if err != nil {
			t.Fatal(err)
		}
		if stray == "db-2.log" {
			for i := range data {
				data[i] = byte(i*7 + 3)
			}
		}
		if err := vfs.WriteFileAtomic(mem, testDir+"/"+stray, data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err = Open(testDir, Options{FS: mem, SegmentSize: 64 << 10})
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "if "+stray+" is not this store's") {
			t.Errorf("%s: Open: %v; want ErrCorrupt naming %s", stray, err, stray)
		}
	}
}
