package stats

import "fmt"

import "strings"

// interner gives each function name a small id, so live blocks need not hold strings that may
// point into a reader's reused buffers.
type interner struct {
	// callsites names a recorded callsite (a PyTorch snapshot's stack), when the source knows it.
	callsites func(pid uint32, id uint64) (string, bool)
	ids       map[string]uint16
	names     []string
	last      string
	lastI     uint16
	prev      string // the name before last (allocations and frees usually alternate)
	prevI     uint16
}

func newInterner() *interner { return &interner{ids: make(map[string]uint16)} }

func (n *interner) id(s string) uint16 {
	if len(n.names) > 0 && s == n.last {
		return n.lastI
	}
	return n.idSlow(s)
}

// idSlow returns the id of s, which is not the last name looked up.
func (n *interner) idSlow(s string) uint16 {
	if len(n.names) > 0 {
		if s == n.prev && len(n.names) > 1 {
			n.last, n.lastI, n.prev, n.prevI = n.prev, n.prevI, n.last, n.lastI
			return n.lastI
		}
	}
	if len(n.names) <= 8 { // few names: comparing beats hashing
		for i, name := range n.names {
			if name == s {
				n.remember(name, uint16(i))
				return uint16(i)
			}
		}
	}
	i, ok := n.ids[s]
	if !ok {
		if len(n.names) == 1<<16-1 {
			return 0
		}
		c := strings.Clone(s)
		i = uint16(len(n.names))
		n.names = append(n.names, c)
		n.ids[c] = i
		s = c
	}
	n.remember(n.names[i], i)
	return i
}

func (n *interner) remember(s string, i uint16) {
	n.prev, n.prevI = n.last, n.lastI
	n.last, n.lastI = s, i
}

func (n *interner) name(i uint16) string {
	if int(i) < len(n.names) {
		return n.names[i]
	}
	return ""
}

// callsite names a callsite of process pid for a report: the source's name for it, else its
// address.
func (n *interner) callsite(pid uint32, id uint64) string {
	if n.callsites != nil {
		if name, ok := n.callsites(pid, id); ok {
			return name
		}
	}
	return fmt.Sprintf("%#x", id)
}
