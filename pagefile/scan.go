package pagefile

import (
	"errors"
	"fmt"
)

// scanChunk is how many bytes of db.data the scan reads at once.
const scanChunk = 4 << 20

// maxDamaged bounds the damaged pages a scan lists (Report.Damaged) before
// it gives up with ErrCorrupt: past a few, the page file is not worth
// trusting page by page.
var maxDamaged = 64 // a variable for tests

// scan rebuilds the free list by one sequential pass over every page in
// [FirstDataPage, meta.PageCount), verifying each page's checksum and ID:
// PageFree pages are free, every other type is in use. A damaged page is
// neither: it is listed in Report.Damaged and left off the free list (a
// damaged page that was free would otherwise make the store unopenable
// whenever its free list is rebuilt, while the trusted path opens it);
// more than maxDamaged of them is ErrCorrupt naming the first.
//
// It runs inside Open, before the File is shared.
func (o *opener) scan(meta Meta) (*freeList, error) {
	f := o.f
	ps := int64(f.pageSize)
	n := PageID(meta.PageCount)
	l := newFreeList()
	var run Range
	flush := func() {
		if run.Len > 0 {
			l.t.ReplaceOrInsert(run)
			l.total += run.Len
			run = Range{}
		}
	}
	per := PageID(max(1, scanChunk/ps))
	buf := make([]byte, int64(min(per, n))*ps)
	for id := FirstDataPage; id < n; id += per {
		k := min(per, n-id)
		chunk := buf[:int64(k)*ps]
		off := int64(id) * ps
		if err := readFull(f.data, chunk, off); err != nil && len(f.mu.overlay) == 0 {
			return nil, fmt.Errorf("%w: %s@%d: scanning %v..%d: %w", ErrCorrupt, f.dataName, off, id, uint64(id+k), err)
		}
		for j := PageID(0); j < k; j++ {
			pid := id + j
			b := chunk[int64(j)*ps : int64(j+1)*ps]
			boff := off + int64(j)*ps
			name := f.dataName
			if img := f.mu.overlay[pid]; img != nil {
				b, name = img, f.redoName
			}
			h, err := decodePage(b, pid, name, boff)
			if errors.Is(err, ErrCorrupt) && len(o.rep.Damaged) < maxDamaged {
				o.rep.PagesScanned++
				o.rep.Damaged = append(o.rep.Damaged, DamagedPage{ID: pid, Err: err})
				flush()
				continue
			}
			if errors.Is(err, ErrCorrupt) && len(o.rep.Damaged) > 0 {
				return nil, fmt.Errorf("%w; and %d more damaged pages, up to %v", o.rep.Damaged[0].Err, len(o.rep.Damaged), pid)
			}
			if err != nil {
				return nil, err
			}
			if f.opts.ReadOnly && h.checkpoint > meta.Seq {
				// A checkpoint of the writing process rewrote it in place,
				// or, if none ran, that checkpoint's meta is lost.
				return nil, f.newerPageErr(boff, pid, h.checkpoint, meta.Seq)
			}
			o.rep.PagesScanned++
			if h.typ == PageFree {
				if run.Len > 0 && run.End() == pid {
					run.Len++
				} else {
					flush()
					run = Range{Start: pid, Len: 1}
				}
			}
		}
	}
	flush()
	return l, nil
}
