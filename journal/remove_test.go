package journal

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/vfs"
	"github.com/kdb-project/kdb/vfs/errfs"
)

func TestJournal_RemoveBefore(t *testing.T) {
	for _, archive := range []string{"", "/archive/j"} {
		t.Run("archive="+archive, func(t *testing.T) {
			fs, j, bs := build(t, Options{ArchiveDir: archive}, 300)
			segs := j.Segments()
			if len(segs) < 4 {
				t.Fatalf("need 4 segments, have %d", len(segs))
			}
			cut := segs[2].First
			removed, err := j.RemoveBefore(cut)
			if err != nil {
				t.Fatal(err)
			}
			if want := []SegmentID{segs[0].ID, segs[1].ID}; !slices.Equal(removed, want) {
				t.Fatalf("removed %v, want %v", removed, want)
			}
			for _, id := range removed {
				if ok, _ := vfs.Exists(fs, testDir+"/"+id.String()); ok {
					t.Fatalf("%s still in the journal directory", id)
				}
				inArchive, _ := vfs.Exists(fs, archive+"/"+id.String())
				if inArchive != (archive != "") {
					t.Fatalf("%s in archive: %v", id, inArchive)
				}
				if _, err := j.Read(Location{id, segHeaderSize}); !errors.Is(err, ErrNotFound) {
					t.Fatalf("Read of removed segment: %v", err)
				}
			}
			var kept []batch
			for _, b := range bs {
				if !b.locs[0].Less(cut) {
					kept = append(kept, b)
				}
			}
			got := collect(t, j)
			if len(got) == 0 || got[0].loc != cut {
				t.Fatalf("iteration starts at %v, want %v", got[0].loc, cut)
			}
			if err := j.Iterate(bs[0].locs[0], func(Location, Record) error { return nil }); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Iterate from a removed segment: %v", err)
			}
			// Never the active segment, whatever loc says.
			active := segs[len(segs)-1].ID
			removed, err = j.RemoveBefore(Location{active + 10, 0})
			if err != nil || slices.Contains(removed, active) {
				t.Fatalf("RemoveBefore(past the end): %v %v", removed, err)
			}
			if segs2 := j.Segments(); len(segs2) != 1 || segs2[0].ID != active {
				t.Fatalf("segments left: %+v", segs2)
			}
			// The removal is durable: a crash image opens with the same segments.
			img := fs.CrashClone(vfs.CrashOptions{})
			mustClose(t, j)
			j2, rep := openMem(t, img, Options{})
			defer mustClose(t, j2)
			if rep.Segments != 1 || len(rep.Skipped) != 0 {
				t.Fatalf("reopen: %+v", rep)
			}
			requireBatches(t, j2, bs[len(bs)-countIn(bs, active):])
		})
	}
}

func countIn(bs []batch, id SegmentID) int {
	n := 0
	for _, b := range bs {
		if b.locs[0].Segment == id {
			n++
		}
	}
	return n
}

func TestJournal_RemoveBeforeSyncDirFailureIsSticky(t *testing.T) {
	mem := vfs.NewMem()
	efs := errfs.Wrap(mem)
	j, _ := openMem(t, efs, Options{})
	for i := 0; i < 200; i++ {
		if _, err := j.Append(Record{Type: 1, Payload: payload(i, 0, 500)}); err != nil {
			t.Fatal(err)
		}
	}
	efs.AddRule(errfs.FromNth(vfs.OpSyncDir, 1, errfs.ErrInjected)) // counts from now
	_, err := j.RemoveBefore(j.Tail())
	if !errors.Is(err, errfs.ErrInjected) || !errors.Is(j.Err(), errfs.ErrInjected) {
		t.Fatalf("RemoveBefore: %v, Err: %v", err, j.Err())
	}
	if _, err := j.Append(Record{Type: 1}); !errors.Is(err, errfs.ErrInjected) {
		t.Fatalf("Append after failure: %v", err)
	}
	if err := j.Close(); !errors.Is(err, errfs.ErrInjected) {
		t.Fatalf("Close: %v", err)
	}
}

// A removed segment whose close fails: the removal stands (the name is
// gone, durably), RemoveBefore succeeds, the journal goes on, and the
// failure is logged rather than lost.
func TestJournal_RemoveBeforeCloseFailureIsLogged(t *testing.T) {
	mem := vfs.NewMem()
	efs := errfs.Wrap(mem)
	var logged bytes.Buffer
	j, _ := openMem(t, efs, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	for i := 0; i < 200; i++ {
		if _, err := j.Append(Record{Type: 1, Payload: payload(i, 0, 500)}); err != nil {
			t.Fatal(err)
		}
	}
	first := j.Segments()[0].ID
	efs.AddRule(errfs.OnNth(vfs.OpClose, 1, errfs.ErrInjected)) // the first removed segment's close
	removed, err := j.RemoveBefore(j.Tail())
	if err != nil || len(removed) == 0 || removed[0] != first {
		t.Fatalf("RemoveBefore: removed %v, err %v", removed, err)
	}
	if ok, _ := vfs.Exists(mem, testDir+"/"+first.String()); ok {
		t.Fatalf("%s still in the journal directory", first)
	}
	if !strings.Contains(logged.String(), "close of a removed segment failed") || !strings.Contains(logged.String(), first.String()) {
		t.Fatalf("not logged: %q", logged.String())
	}
	if j.Err() != nil {
		t.Fatal(j.Err())
	}
	if _, err := j.Append(Record{Type: 1}); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestJournal_RemoveBeforeArchiveIsDurable: RemoveBefore creates the
// archive directory and its missing parents durably before it moves
// segments in, so that a power loss after it returned keeps the archived
// segments.
func TestJournal_RemoveBeforeArchiveIsDurable(t *testing.T) {
	const archive = "/arch/old"
	fs, j, _ := build(t, Options{ArchiveDir: archive}, 300)
	segs := j.Segments()
	if len(segs) < 3 {
		t.Fatalf("need 3 segments, have %d", len(segs))
	}
	removed, err := j.RemoveBefore(segs[2].First)
	if err != nil || len(removed) != 2 {
		t.Fatalf("RemoveBefore: %v %v", removed, err)
	}
	img := fs.CrashClone(vfs.CrashOptions{}) // a power loss: nothing unsynced kept
	mustClose(t, j)
	for _, id := range removed {
		name := archive + "/" + id.String()
		want, err := vfs.ReadFile(fs, name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := vfs.ReadFile(img, name)
		if err != nil {
			t.Fatalf("archived %s after a power loss: %v (the archive directory was not durable)", id, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("archived %s after a power loss: %d bytes differ from the %d archived", id, len(got), len(want))
		}
	}
}
