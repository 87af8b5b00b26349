package pagefile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/internal/checksum"
	"github.com/kdb-project/kdb/vfs"
)

// makeRedo encodes a complete batch of checkpoint goldenMeta (page size ps)
// holding an image at each position: the meta image at a meta slot
// position, a test page elsewhere. Positions are taken as given.
func makeRedo(ps int, pageCount uint64, positions []uint64) []byte {
	h := fileHeader{pageSize: ps, storeID: goldenStoreID}
	m := goldenMeta
	m.PageSize, m.PageCount, m.Root = uint32(ps), pageCount, 0
	images := make([]byte, len(positions)*ps)
	sums := make([]byte, 8*len(positions))
	for i, p := range positions {
		img := images[i*ps : (i+1)*ps]
		if p < uint64(FirstDataPage) {
			encodeMeta(img, &m, h.storeID)
		} else {
			encodePage(img, PageID(p), 16, []byte("image"), m.Seq)
		}
		putSum(sums[8*i:], img)
	}
	head := encodeRedoHead(h.storeID, m.ID, ps, pageCount, positions)
	return bytes.Join([][]byte{head, images, redoTrailer(head, sums)}, nil)
}

// TestRedo_DecodeRefusesInconsistentBatches guards decodeRedo's checks of
// a complete batch (valid trailer) at their bounds: positions that repeat,
// a position equal to the new page count, and a batch without the meta
// image (applying it would write pages no meta ever names).
func TestRedo_DecodeRefusesInconsistentBatches(t *testing.T) {
	const ps, pc = 512, 20
	meta := uint64(metaSlotPage + goldenMeta.Seq%numMetaSlots)
	if _, err := decodeRedo(bytes.NewReader(makeRedo(ps, pc, []uint64{meta, 5, pc - 1})), int64(len(makeRedo(ps, pc, []uint64{meta, 5, pc - 1}))), "db.redo"); err != nil {
		t.Fatalf("valid batch: %v", err)
	}
	cases := []struct {
		name      string
		positions []uint64
	}{
		{"position repeated", []uint64{meta, 5, 5}},
		{"position at the page count", []uint64{meta, 5, pc}},
		{"no meta image", []uint64{5, 6}},
		{"meta image of the other slot", []uint64{metaSlotPage + (goldenMeta.Seq+1)%numMetaSlots, 5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := makeRedo(ps, pc, tc.positions)
			h, err := decodeRedo(bytes.NewReader(b), int64(len(b)), "db.redo")
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeRedo = %+v, %v; want ErrCorrupt", h, err)
			}
		})
	}
}

// editRedo applies edit to the db.redo of fsys, clears its applied mark
// and reseals its trailer (FORMAT.md §2.6), so the batch is complete.
func editRedo(t *testing.T, fsys vfs.FS, edit func(b []byte, ps int, metaImage []byte)) {
	t.Helper()
	b, err := vfs.ReadFile(fsys, "/db/db.redo")
	if err != nil {
		t.Fatal(err)
	}
	ps := int(binary.LittleEndian.Uint32(b[redoPageSize:]))
	count := int(binary.LittleEndian.Uint64(b[redoCount:]))
	headLen := redoHeaderSize + 8*count
	var metaImage []byte
	for i := 0; i < count; i++ {
		if binary.LittleEndian.Uint64(b[redoHeaderSize+8*i:]) < uint64(FirstDataPage) {
			metaImage = b[headLen+i*ps : headLen+(i+1)*ps]
		}
	}
	edit(b, ps, metaImage)
	sums := make([]byte, 8*count)
	for i := 0; i < count; i++ {
		putSum(sums[8*i:], b[headLen+i*ps:headLen+(i+1)*ps])
	}
	tr := b[len(b)-redoTrailerSize:]
	binary.LittleEndian.PutUint32(tr[trailerApplied:], 0)
	binary.LittleEndian.PutUint64(tr[trailerChecksum:], checksum.Seeded2(0, b[:headLen], sums))
	if err := vfs.WriteFileAtomic(fsys, "/db/db.redo", b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestFile_RedoOfAnotherCheckpointIgnoredOrRefused guards Open's decision
// on a complete db.redo that is not the batch of the meta's checkpoint or
// a newer one: a batch of another store (even a newer checkpoint of it),
// and a batch with the meta's sequence but another checkpoint ID (a failed
// checkpoint whose sequence was taken again) are ignored, db.data
// untouched; a batch whose meta image disagrees with its own header is
// ErrCorrupt, never applied.
func TestFile_RedoOfAnotherCheckpointIgnoredOrRefused(t *testing.T) {
	mem := newBase(t, crashTestOpts, 5)
	f, _ := mustOpen(t, mem, crashTestOpts)
	meta := f.Meta()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	t.Run("another store's newer batch", func(t *testing.T) {
		other := newBase(t, crashTestOpts, 5)
		of, _ := mustOpen(t, other, crashTestOpts)
		if err := workload(of, 1, 9, nil); err != nil { // a checkpoint newer than meta
			t.Fatal(err)
		}
		if err := of.Close(); err != nil {
			t.Fatal(err)
		}
		fsys := mem.Clone()
		b, err := vfs.ReadFile(other, "/db/db.redo")
		if err != nil {
			t.Fatal(err)
		}
		if err := vfs.WriteFileAtomic(fsys, "/db/db.redo", b, 0o600); err != nil {
			t.Fatal(err)
		}
		editRedo(t, fsys, func([]byte, int, []byte) {}) // not marked applied
		f, rep, err := Open("/db", Options{FS: fsys})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer f.Close()
		if rep.RedoApplied || !strings.Contains(rep.RedoIgnored, "store ID") || f.Meta().ID != meta.ID {
			t.Fatalf("report %+v, meta %v: want the batch ignored for its store ID", rep, f.Meta().ID)
		}
	})
	t.Run("same sequence, other checkpoint ID", func(t *testing.T) {
		fsys := mem.Clone()
		editRedo(t, fsys, func(b []byte, _ int, _ []byte) { b[redoRand] ^= 0xff })
		f, rep, err := Open("/db", Options{FS: fsys})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer f.Close()
		if rep.RedoApplied || !strings.Contains(rep.RedoIgnored, "!= meta") || f.Meta().ID != meta.ID {
			t.Fatalf("report %+v: want the batch ignored for its checkpoint ID", rep)
		}
	})
	t.Run("meta image disagrees with the batch", func(t *testing.T) {
		fsys := mem.Clone()
		editRedo(t, fsys, func(_ []byte, ps int, img []byte) {
			m, err := decodeMeta(img, int(meta.Seq%numMetaSlots), fileHeader{pageSize: ps, storeID: readStoreID(t, fsys)}, "db.redo", 0)
			if err != nil {
				t.Fatal(err)
			}
			m.PageCount-- // still above the root: the image alone is valid
			encodeMeta(img, &m, readStoreID(t, fsys))
		})
		f, _, err := Open("/db", Options{FS: fsys})
		if err == nil {
			m := f.Meta()
			f.Close()
			t.Fatalf("Open applied the batch: meta %+v", m)
		}
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Open: %v, want ErrCorrupt", err)
		}
	})
}
