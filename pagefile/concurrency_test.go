package pagefile

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb/vfs"
)

// selfPayload encodes id and ver and fills the rest from them, so a reader
// can check a payload on its own.
func selfPayload(id PageID, ver uint64, n int) []byte {
	p := make([]byte, max(n, 16))
	binary.LittleEndian.PutUint64(p, uint64(id))
	binary.LittleEndian.PutUint64(p[8:], ver)
	for i := 16; i < len(p); i++ {
		p[i] = byte(uint64(id)*13 + ver*7 + uint64(i))
	}
	return p
}

// touchCounts counts, per page, the writes and frees the mutator has issued.
type touchCounts struct{ m sync.Map }

func (c *touchCounts) counter(id PageID) *atomic.Uint64 {
	v, _ := c.m.LoadOrStore(id, new(atomic.Uint64))
	return v.(*atomic.Uint64)
}

func (c *touchCounts) touch(id PageID)     { c.counter(id).Add(1) }
func (c *touchCounts) of(id PageID) uint64 { return c.counter(id).Load() }

func checkSelfPayload(id PageID, p []byte) bool {
	if len(p) < 16 || PageID(binary.LittleEndian.Uint64(p)) != id {
		return false
	}
	ver := binary.LittleEndian.Uint64(p[8:])
	for i := 16; i < len(p); i++ {
		if p[i] != byte(uint64(id)*13+ver*7+uint64(i)) {
			return false
		}
	}
	return true
}

// TestFile_ConcurrentReadsDuringCommit runs readers against one mutator
// whose checkpoints commit in the background while it keeps mutating, with
// a small GrowBy so the mapping is replaced often. Every read is either a
// whole, self-consistent payload, a freed page, or an allocated page not
// yet written; never corrupt. Run with -race.
func TestFile_ConcurrentReadsDuringCommit(t *testing.T) {
	for _, name := range []string{"os", "mem"} {
		t.Run(name, func(t *testing.T) {
			var fsys vfs.FS = vfs.NewMem()
			dir := "/db"
			if name == "os" {
				fsys, dir = vfs.OS, t.TempDir()
			}
			f, _, err := Open(dir, Options{FS: fsys, PageSize: 512, GrowBy: 8192, UnsafeNoSync: name == "os"})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var stop atomic.Bool
			var reads atomic.Int64
			var wg sync.WaitGroup
			errc := make(chan error, 8)
			var touches touchCounts
			for r := 0; r < 3; r++ {
				wg.Add(1)
				go func(seed uint64) {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(seed, 1))
					for !stop.Load() {
						n := f.PageCount()
						if n <= FirstDataPage {
							continue
						}
						id := FirstDataPage + PageID(rng.IntN(int(n-FirstDataPage)))
						before := touches.of(id)
						typ, p, err := f.Read(id)
						reads.Add(1)
						switch {
						case errors.Is(err, ErrOutOfRange): // allocated, not yet written
						case err != nil:
							errc <- err
							return
						case typ == PageFree:
						case !checkSelfPayload(id, p):
							// The contract keeps a payload unchanged only until
							// the caller writes or frees that page again (a
							// commit may then rewrite the mapped bytes).
							if touches.of(id) != before {
								continue
							}
							errc <- errors.New("torn or foreign payload for " + id.String())
							return
						}
					}
				}(uint64(r))
			}
			rng := rand.New(rand.NewPCG(9, 9))
			var live []PageID
			ver := uint64(0)
			var commit sync.WaitGroup
			var commitErr error
			for round := 0; round < 60; round++ {
				for i := 0; i < 20; i++ {
					ver++
					switch op := rng.IntN(10); {
					case op < 5 || len(live) < 10:
						id, err := f.Allocate()
						if err != nil {
							t.Fatal(err)
						}
						touches.touch(id)
						if err := f.Write(id, testType, selfPayload(id, ver, rng.IntN(400))); err != nil {
							t.Fatal(err)
						}
						live = append(live, id)
					case op < 8:
						id := live[rng.IntN(len(live))]
						touches.touch(id)
						if err := f.Write(id, testType, selfPayload(id, ver, rng.IntN(400))); err != nil {
							t.Fatal(err)
						}
					default:
						j := rng.IntN(len(live))
						touches.touch(live[j])
						if err := f.Free(live[j]); err != nil {
							t.Fatal(err)
						}
						live[j] = live[len(live)-1]
						live = live[:len(live)-1]
					}
				}
				commit.Wait()
				if commitErr != nil {
					t.Fatal(commitErr)
				}
				if round == 20 {
					// On a loaded machine the mutator of the in-memory
					// file could finish before a reader ran at all: from
					// here on the commits run beside reads.
					for deadline := time.Now().Add(10 * time.Second); reads.Load() == 0 && time.Now().Before(deadline); {
						time.Sleep(time.Millisecond)
					}
				}
				cp, err := f.PrepareCheckpoint(MetaUpdate{})
				if err != nil {
					t.Fatal(err)
				}
				commit.Add(1)
				go func() {
					defer commit.Done()
					commitErr = f.CommitCheckpoint(cp)
				}()
			}
			commit.Wait()
			stop.Store(true)
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			if commitErr != nil {
				t.Fatal(commitErr)
			}
			if reads.Load() == 0 {
				t.Fatal("no reads ran")
			}
			// Everything committed reads back after a reopen.
			if err := f.Checkpoint(MetaUpdate{}); err != nil {
				t.Fatal(err)
			}
			want := captureState(t, f)
			g, rep, err := Open(dir, Options{FS: fsys, ForceScan: true})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if d := equalState(captureState(t, g), want, true); d != "" {
				t.Fatalf("after reopen (%+v): %s", rep, d)
			}
		})
	}
}
