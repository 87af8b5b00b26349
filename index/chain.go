package index

import (
	"encoding/binary"
	"fmt"

	"github.com/kdb-project/kdb/pagefile"
)

// Chains of pages hold large values (pageOverflow) and the pending-free list
// (pagePending): FORMAT.md §3.5.

// chainData returns the data capacity of one chain page.
func (s *Store) chainData() int { return s.lim.payload - chainHeaderSize }

// chainLinks returns the number of pages a chain of total bytes occupies.
func (s *Store) chainLinks(total uint64) uint64 {
	per := uint64(s.chainData())
	return (total + per - 1) / per
}

// writeChainLocked writes data as a chain of typ pages taken from alloc and
// returns its first page (0 for empty data) and all its pages. On error the
// pages already allocated are returned too, so that the caller accounts for
// them.
//
// The caller must hold s.wmu.
func (s *Store) writeChainLocked(typ pagefile.PageType, data []byte, alloc func() (pagefile.PageID, error)) (pagefile.PageID, []pagefile.PageID, error) {
	if len(data) == 0 {
		return 0, nil, nil
	}
	n := int(s.chainLinks(uint64(len(data))))
	ids := make([]pagefile.PageID, 0, n)
	for range n {
		id, err := alloc()
		if err != nil {
			return 0, ids, fmt.Errorf("index: allocate chain page: %w", err)
		}
		ids = append(ids, id)
	}
	per := s.chainData()
	b := s.w.buf
	for i, id := range ids {
		var next pagefile.PageID
		if i+1 < n {
			next = ids[i+1]
		}
		chunk := data[min(i*per, len(data)):min((i+1)*per, len(data))]
		binary.LittleEndian.PutUint64(b[offChainNext:], uint64(next))
		binary.LittleEndian.PutUint32(b[offChainLen:], uint32(len(chunk)))
		copy(b[chainHeaderSize:], chunk)
		if err := s.pf.Write(id, typ, b[:chainHeaderSize+len(chunk)]); err != nil {
			return 0, ids, fmt.Errorf("index: write chain %s: %w", id, err)
		}
	}
	return ids[0], ids, nil
}

// walkChain calls fn with each page of the chain of typ pages starting at
// head and its data, checking that the chain holds exactly total bytes in
// the fewest pages. head 0 is the empty chain (total must be 0). It is safe
// for concurrent use; data is valid only during fn.
func (s *Store) walkChain(head pagefile.PageID, typ pagefile.PageType, total uint64, fn func(id pagefile.PageID, data []byte) error) error {
	if head == 0 {
		if total != 0 {
			return fmt.Errorf("%w: chain of %d bytes starts at page 0", ErrCorrupt, total)
		}
		return nil
	}
	links := s.chainLinks(total)
	var got uint64
	id := head
	for i := uint64(0); ; i++ {
		if i >= links {
			return corruptf(id, "chain from %s longer than %d pages for %d bytes", head, links, total)
		}
		t, b, err := s.pf.Read(id)
		if err != nil {
			return pageErr(id, err)
		}
		if t != typ {
			return corruptf(id, "chain from %s: page type %d, want %d", head, t, typ)
		}
		if len(b) < chainHeaderSize {
			return corruptf(id, "chain page payload of %d bytes too short", len(b))
		}
		next := pagefile.PageID(binary.LittleEndian.Uint64(b[offChainNext:]))
		n := uint64(binary.LittleEndian.Uint32(b[offChainLen:]))
		want := min(uint64(s.chainData()), total-got)
		if n != want {
			return corruptf(id, "chain from %s: link holds %d bytes, want %d", head, n, want)
		}
		if n > uint64(len(b)-chainHeaderSize) {
			return corruptf(id, "chain from %s: link says it holds %d bytes, its page's payload has room for %d", head, n, len(b)-chainHeaderSize)
		}
		if err := fn(id, b[chainHeaderSize:chainHeaderSize+n]); err != nil {
			return err
		}
		got += n
		if got == total {
			if next != 0 {
				return corruptf(id, "chain from %s: continues to %s after its %d bytes", head, next, total)
			}
			return nil
		}
		if next == 0 {
			return corruptf(id, "chain from %s ends after %d of %d bytes", head, got, total)
		}
		id = next
	}
}

// readChain returns the total bytes of the chain at head in a new slice.
func (s *Store) readChain(head pagefile.PageID, typ pagefile.PageType, total uint64) ([]byte, error) {
	if total > MaxValueSize && typ == pageOverflow {
		return nil, fmt.Errorf("%w: %s: value of %d bytes above maximum", ErrCorrupt, head, total)
	}
	out := make([]byte, 0, total)
	err := s.walkChain(head, typ, total, func(_ pagefile.PageID, data []byte) error {
		out = append(out, data...)
		return nil
	})
	return out, err
}
