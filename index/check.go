package index

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/kdb-project/kdb/pagefile"
)

// CheckReport describes what Check found.
type CheckReport struct {
	Trees          int    // trees in the catalog
	Keys           uint64 // keys in all trees
	PageCount      uint64 // the page file's PageCount
	ReachablePages uint64 // pages reachable from the index root: root page, pending chain, catalog, trees, overflow chains
	FreePages      uint64 // pages in the page file's free list
	// DamagedPages counts the pages that are neither reachable nor free
	// and fail their checksum (or ID): no tree reaches them, so they hold
	// nothing of the index; a free page damaged on disk, which a free-list
	// scan or proof sets aside (a writable open's scan frees it again).
	// They are not problems. FirstDamaged is the first (0: none), and
	// DamagedReason why it fails.
	DamagedPages  uint64
	FirstDamaged  pagefile.PageID
	DamagedReason string
	PendingPages  uint64  // pages replaced or dropped but still visible to running Views (or pending at the last checkpoint)
	BranchPages   uint64  // branch nodes, catalog included
	LeafPages     uint64  // leaf nodes, catalog included
	OverflowPages uint64  // overflow chain pages
	Depth         int     // largest tree depth (1 = a root leaf; catalog included)
	LeafFill      float64 // average fraction of a leaf payload in use
}

// maxProblems bounds the problems a Check error lists.
const maxProblems = 10

// Check verifies the whole index against the page file: every page's
// checksum (through pagefile Read), node structure, key order within nodes,
// key bounds between levels, equal leaf depth in each tree, overflow chain
// lengths, key counts against the catalog, and that the pages reachable from
// the index root, the pages pending free and the page file's free pages are
// together exactly [FirstDataPage, PageCount), each exactly once.
//
// It holds the writer lock (Updates wait) but not the readers: Views go on.
// Problems give an error wrapping ErrCorrupt that names the first of them
// (page, key); other errors (I/O) are returned as they are.
func (s *Store) Check() (*CheckReport, error) {
	return s.CheckProgress(nil)
}

// CheckProgress is Check that calls progress (if not nil) with the number of
// reachable pages checked so far, every 1,024 pages.
func (s *Store) CheckProgress(progress func(pages uint64)) (*CheckReport, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	c, err := s.walkOwned(progress)
	if err != nil {
		return nil, err
	}
	pc := c.pc
	for _, r := range s.pf.FreeRanges() {
		for i := uint64(0); i < r.Len; i++ {
			c.mark(r.Start+pagefile.PageID(i), ownFree)
			c.rep.FreePages++
			if r.Start+pagefile.PageID(i) >= pc {
				break
			}
		}
	}
	for i, o := range c.owner {
		if o != 0 {
			continue
		}
		id := pagefile.FirstDataPage + pagefile.PageID(i)
		if _, _, err := c.s.pf.Read(id); errors.Is(err, pagefile.ErrCorrupt) {
			// Damaged, and no tree reaches it: set aside, not leaked.
			if c.rep.DamagedPages == 0 {
				c.rep.FirstDamaged, c.rep.DamagedReason = id, err.Error()
			}
			c.rep.DamagedPages++
			continue
		}
		c.problem(fmt.Errorf("%w: %s is neither reachable nor free (leaked)", ErrCorrupt, id))
		c.leaked++
	}
	if c.leafBytes > 0 {
		c.rep.LeafFill = float64(c.leafUsed) / float64(c.leafBytes)
	}
	if c.fatal != nil {
		return c.rep, c.fatal
	}
	if len(c.problems) > 0 {
		var err error = c.problems[0]
		var more []string
		for _, p := range c.problems[1:] {
			more = append(more, p.Error())
		}
		if len(more) > 0 {
			err = fmt.Errorf("%w; and %d more: %s", c.problems[0], len(more), strings.Join(more, "; "))
		}
		if c.leaked == c.found {
			err = leakedOnly{err}
		}
		return c.rep, err
	}
	return c.rep, nil
}

const (
	ownReachable = 1 + iota
	ownPending
	ownFree
)

var ownNames = [...]string{ownReachable: "reachable", ownPending: "pending free", ownFree: "free"}

type checker struct {
	s        *Store
	tx       *Tx
	pc       pagefile.PageID
	owner    []uint8 // per page from FirstDataPage: own*
	rep      *CheckReport
	problems []error
	// found counts the problems (problems keeps the first maxProblems),
	// leaked those that are leaked pages.
	found, leaked int
	fatal         error // a non-corruption error (I/O): stop
	progress      func(pages uint64)

	leafUsed, leafBytes uint64
}

func (c *checker) problem(err error) {
	if !errors.Is(err, ErrCorrupt) {
		if c.fatal == nil {
			c.fatal = err
		}
		return
	}
	c.found++
	if len(c.problems) < maxProblems {
		c.problems = append(c.problems, err)
	}
}

// mark records that page id is owned as o; false if it cannot be (out of
// range or already owned).
func (c *checker) mark(id pagefile.PageID, o uint8) bool {
	if id < pagefile.FirstDataPage || id >= c.pc {
		c.problem(fmt.Errorf("%w: %s (%s) outside [%d, %d)", ErrCorrupt, id, ownNames[o], pagefile.FirstDataPage, c.pc))
		return false
	}
	i := id - pagefile.FirstDataPage
	if prev := c.owner[i]; prev != 0 {
		c.problem(fmt.Errorf("%w: %s is both %s and %s", ErrCorrupt, id, ownNames[prev], ownNames[o]))
		return false
	}
	c.owner[i] = o
	if o == ownReachable {
		c.rep.ReachablePages++
		if c.progress != nil && c.rep.ReachablePages%1024 == 0 {
			c.progress(c.rep.ReachablePages)
		}
	}
	return true
}

func (c *checker) expectType(id pagefile.PageID, want pagefile.PageType) {
	typ, _, err := c.s.pf.Read(id)
	if err != nil {
		c.problem(pageErr(id, err))
	} else if typ != want {
		c.problem(corruptf(id, "page type %d, want %d", typ, want))
	}
}

func (c *checker) checkCatalog() error {
	var names [][]byte
	var entries [][]byte
	var at []pagefile.PageID // the catalog leaf holding each entry
	err := c.walkTree(c.tx.catalog, func(key, val []byte, ovf pagefile.PageID, id pagefile.PageID) {
		if ovf != 0 || len(val) != catalogEntrySize {
			c.problem(corruptf(id, "catalog entry %q is not %d inline bytes", key, catalogEntrySize))
			return
		}
		names = append(names, key)
		entries = append(entries, val)
		at = append(at, id)
	})
	if err != nil {
		return err
	}
	for i, name := range names {
		root := pagefile.PageID(binary.LittleEndian.Uint64(entries[i][offCatalogRoot:]))
		count := binary.LittleEndian.Uint64(entries[i][offCatalogCount:])
		c.rep.Trees++
		var keys uint64
		err := c.walkTree(root, func([]byte, []byte, pagefile.PageID, pagefile.PageID) { keys++ })
		if err != nil {
			return err
		}
		if keys != count {
			// Either side may be the damaged one: the catalog's leaf,
			// or a leaf of the tree (whose cells Check walked).
			c.problem(corruptf(at[i], "tree %q: catalog count %d (in this catalog leaf), tree rooted at %s holds %d keys", name, count, root, keys))
		}
		c.rep.Keys += keys
	}
	return c.fatal
}

// walkTree checks the tree at root and calls fn for each leaf entry.
func (c *checker) walkTree(root pagefile.PageID, fn func(key, val []byte, ovf, page pagefile.PageID)) error {
	if root == 0 {
		return nil
	}
	leafDepth := -1
	c.walkNode(root, nil, nil, 1, &leafDepth, fn)
	c.rep.Depth = max(c.rep.Depth, leafDepth)
	return c.fatal
}

// walkNode checks node id, whose keys must lie in [lo, hi) (hi nil: no upper
// bound; lo nil: no lower bound), at the given depth.
func (c *checker) walkNode(id pagefile.PageID, lo, hi []byte, depth int, leafDepth *int, fn func(key, val []byte, ovf, page pagefile.PageID)) {
	if c.fatal != nil {
		return
	}
	if depth > maxDepth {
		c.problem(corruptf(id, "tree deeper than %d levels", maxDepth))
		return
	}
	if !c.mark(id, ownReachable) {
		return
	}
	typ, p, err := c.s.pf.Read(id)
	if err != nil {
		c.problem(pageErr(id, err))
		return
	}
	n, err := decodeNode(id, typ, p)
	if err != nil {
		c.problem(err)
		return
	}
	if sz := n.size(); sz > c.s.lim.payload {
		c.problem(corruptf(id, "node of %d bytes exceeds the payload capacity %d", sz, c.s.lim.payload))
	}
	for i := range n.ents {
		k := n.ents[i].key
		if !n.leaf && i == 0 {
			continue
		}
		if (lo != nil && bytes.Compare(k, lo) < 0) || (hi != nil && bytes.Compare(k, hi) >= 0) {
			c.problem(corruptf(id, "key %q outside its parent's bounds [%q, %q)", k, lo, hi))
		}
	}
	if n.leaf {
		c.rep.LeafPages++
		c.leafUsed += uint64(n.size())
		c.leafBytes += uint64(c.s.lim.payload)
		if *leafDepth < 0 {
			*leafDepth = depth
		} else if *leafDepth != depth {
			c.problem(corruptf(id, "leaf at depth %d, other leaves at depth %d", depth, *leafDepth))
		}
		for i := range n.ents {
			e := &n.ents[i]
			if e.ovf != 0 {
				err := c.s.walkChain(e.ovf, pageOverflow, uint64(e.vlen), func(oid pagefile.PageID, _ []byte) error {
					if !c.mark(oid, ownReachable) {
						return corruptf(oid, "overflow chain of key %q in %s revisits a page", e.key, id)
					}
					c.rep.OverflowPages++
					return nil
				})
				if err != nil {
					c.problem(err)
				}
			}
			fn(e.key, e.val, e.ovf, id)
		}
		return
	}
	c.rep.BranchPages++
	for i := range n.ents {
		clo, chi := lo, hi
		if i > 0 {
			clo = n.ents[i].key
		}
		if i+1 < len(n.ents) {
			chi = n.ents[i+1].key
		}
		c.walkNode(n.ents[i].child, clo, chi, depth+1, leafDepth, fn)
	}
}

// walkOwned marks every page the index owns (reachable from its root,
// its pending chain, its pending-free lists), reading and checking each
// page it reaches; problems are collected in the checker, and only a
// non-corruption error (I/O) is returned. The caller holds wmu.
func (s *Store) walkOwned(progress func(pages uint64)) (*checker, error) {
	pc := s.pf.PageCount()
	c := &checker{s: s, pc: pc, rep: &CheckReport{PageCount: uint64(pc)}, progress: progress}
	if pc > pagefile.FirstDataPage {
		c.owner = make([]uint8, pc-pagefile.FirstDataPage)
	}
	c.tx = &Tx{s: s, catalog: s.mu.cur.catalog}
	if s.w.rootPage != 0 {
		c.mark(s.w.rootPage, ownReachable)
		c.expectType(s.w.rootPage, pageRoot)
	}
	for _, id := range s.w.chain {
		c.mark(id, ownReachable)
		c.expectType(id, pagePending)
	}
	for _, p := range s.w.pending {
		for _, id := range p.ids {
			c.mark(id, ownPending)
			c.rep.PendingPages++
		}
	}
	return c, c.checkCatalog()
}

// Owns returns those of ids the index owns: pages reachable from its root
// (the catalog, every tree, overflow chains), its pending chain and the
// pages waiting on its pending-free lists. It reads every page it reaches,
// so it costs what Check costs; recovery calls it only for pages the page
// file's free-list scan could not read (pagefile.Report.Damaged), to tell a
// damaged free page (unreachable: free it) from a damaged live one (a
// damaged page the walk reaches is marked before it is read).
func (s *Store) Owns(ids []pagefile.PageID) ([]pagefile.PageID, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	c, err := s.walkOwned(nil)
	if err != nil {
		return nil, err
	}
	var owned []pagefile.PageID
	for _, id := range ids {
		if id >= pagefile.FirstDataPage && id < c.pc && c.owner[id-pagefile.FirstDataPage] != 0 {
			owned = append(owned, id)
		}
	}
	return owned, nil
}
