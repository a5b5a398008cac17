package render

import (
	"cmp"
	"fmt"
	"html/template"
	"slices"
	"strings"

	"github.com/allocscope/allocscope/internal/analysis/internal/schema"
)

// mapPalette colours the live blocks of the memory maps by callsite: the callsites that hold the
// most live bytes in a section's maps together get these colours, in order, the same in every map;
// the others, and blocks of no known callsite, get mapOther. Free (cached) bytes are mapFree.
var mapPalette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
	"#bcbd22", "#17becf"}

const (
	mapOther = "#525252"
	mapFree  = "#d9d9d9"
)

// mapView is a memory map as the page shows it (the chart data's maps[Index] draws its bars): a
// caption, a row per region shown, the line of the regions left out and the callsites' colours.
type mapView struct {
	Index   int
	Title   string
	Caption string
	Rows    []mapRow
	More    string
	Legend  []legendItem
}

// mapRow is one region: its label, its bar's width (% of the map's largest region) and its size.
type mapRow struct {
	Label, Address, Value string
	Width                 float64
}

// legendItem is a colour of a map and what it stands for.
type legendItem struct {
	Color template.CSS
	Text  string
}

// mapData is what the page's script draws for one memory map: per region, its entries in columns.
type mapData struct {
	Sites   []string        `json:"sites"`  // callsite names
	Colors  []string        `json:"colors"` // per site
	Free    string          `json:"free"`   // the colour of free bytes
	Other   string          `json:"other"`  // the colour of live bytes of no palette colour
	Regions []mapRegionData `json:"regions"`
}

// mapRegionData is one region of a map and its entries (schema.MapBlock) in columns.
type mapRegionData struct {
	Address string   `json:"a"`
	Label   string   `json:"k"`
	Size    uint64   `json:"s"`
	Free    uint64   `json:"f"`
	Off     []uint64 `json:"o"`
	Len     []uint64 `json:"z"`
	Live    []uint64 `json:"l"`
	Req     []uint64 `json:"r"`
	N       []int    `json:"n"`
	Site    []int32  `json:"c"` // index into the map's sites, -1 for none
	Class   []uint64 `json:"cl"`
}

// peakMaps returns the views and the chart data of the simulations' memory maps, in their order
// (the recommended pool first), a callsite of the same colour in all of them (siteColors).
func peakMaps(sims []schema.Simulation) ([]mapView, []mapData) {
	var maps []schema.Simulation
	for _, s := range sims {
		if s.PeakMap != nil && s.Error == "" {
			maps = append(maps, s)
		}
	}
	colors := siteColors(maps)
	var views []mapView
	var data []mapData
	for i, s := range maps {
		d, legend := mapColumns(s.PeakMap, colors)
		views = append(views, mapViewOf(i, s, legend))
		data = append(data, d)
	}
	return views, data
}

// siteColors gives the callsites with the most live bytes in the blocks the maps show, all maps
// together, the palette's colours, by callsite name.
func siteColors(maps []schema.Simulation) map[string]string {
	live := map[string]uint64{}
	for _, s := range maps {
		for _, r := range s.PeakMap.Shown {
			for _, b := range r.Blocks {
				if b.LiveBytes > 0 && b.Callsite != "" {
					live[b.Callsite] += b.LiveBytes
				}
			}
		}
	}
	sites := make([]string, 0, len(live))
	for site := range live {
		sites = append(sites, site)
	}
	slices.SortFunc(sites, func(a, b string) int { return cmp.Or(cmp.Compare(live[b], live[a]), strings.Compare(a, b)) })
	colors := map[string]string{}
	for i, site := range sites[:min(len(sites), len(mapPalette))] {
		colors[site] = mapPalette[i]
	}
	return colors
}

// mapViewOf is the view of simulation s's map, the index-th of the page's section, with the
// legend of its callsites' colours.
func mapViewOf(index int, s schema.Simulation, legend []legendItem) mapView {
	m := s.PeakMap
	title := s.Name + " (" + s.Settings + ")"
	if strings.HasPrefix(s.Settings, "(") {
		title = s.Name + " " + s.Settings
	}
	v := mapView{Index: index, Title: title,
		Caption: fmt.Sprintf("At request %s: %s reserved in %s regions; %s in %s live blocks (%s requested), "+
			"%s free, the largest free block %s", Count(m.AtRequest), Bytes(m.ReservedBytes), Count(uint64(m.Regions)),
			Bytes(m.LiveBytes), Count(m.LiveBlocks), Bytes(m.RequestedBytes), Bytes(m.FreeBytes),
			Bytes(m.LargestFreeBytes))}
	for _, r := range m.Shown {
		width := 0.0
		if top := m.Shown[0].SizeBytes; top > 0 {
			width = 100 * float64(r.SizeBytes) / float64(top)
		}
		v.Rows = append(v.Rows, mapRow{Label: regionLabel(r), Address: r.Address, Width: width,
			Value: Bytes(r.SizeBytes) + ", " + Bytes(r.FreeBytes) + " free"})
	}
	if hidden := m.Regions - len(m.Shown); hidden > 0 {
		v.More = fmt.Sprintf("+%s more regions: %s, %s free", Count(uint64(hidden)), Bytes(m.HiddenBytes),
			Bytes(m.HiddenFreeBytes))
	}
	v.Legend = append(legend, legendItem{Color: mapFree, Text: "free (cached)"})
	return v
}

// regionLabel names a region's kind: "large · stream 0x7", "plan", "small · expandable".
func regionLabel(r schema.MapRegion) string {
	s := r.Kind
	if r.Stream != 0 {
		s += fmt.Sprintf(" · stream %#x", r.Stream)
	}
	if r.Expandable {
		s += " · expandable"
	}
	return s
}

// mapColumns lays out map m for the script, its callsites in the colours of colors (by name; the
// others mapOther), and returns the legend of its colours: its callsites that have one, most live
// bytes in m first, then mapOther's line when some of its live bytes have that colour.
func mapColumns(m *schema.PeakMap, colors map[string]string) (mapData, []legendItem) {
	d := mapData{Free: mapFree, Other: mapOther}
	index := map[string]int32{}
	var liveBy []uint64
	other := false
	for _, r := range m.Shown {
		rd := mapRegionData{Address: r.Address, Label: regionLabel(r), Size: r.SizeBytes, Free: r.FreeBytes}
		for _, b := range r.Blocks {
			site := int32(-1)
			if b.LiveBytes > 0 && b.Callsite != "" {
				site = intern(index, &d.Sites, b.Callsite)
				liveBy = append(liveBy, make([]uint64, len(d.Sites)-len(liveBy))...)
				liveBy[site] += b.LiveBytes
			}
			_, colored := colors[b.Callsite]
			other = other || (b.LiveBytes > 0 && (site < 0 || !colored))
			rd.Off, rd.Len, rd.Live = append(rd.Off, b.Offset), append(rd.Len, b.SizeBytes), append(rd.Live, b.LiveBytes)
			rd.Req, rd.N, rd.Site = append(rd.Req, b.RequestedBytes), append(rd.N, b.Blocks), append(rd.Site, site)
			rd.Class = append(rd.Class, b.ClassBytes)
		}
		d.Regions = append(d.Regions, rd)
	}
	return d, mapLegend(&d, liveBy, colors, other)
}

// mapLegend sets the colours of d's sites and returns its legend (liveBy: the live bytes of each
// site in the map; other: some live bytes are drawn in mapOther).
func mapLegend(d *mapData, liveBy []uint64, colors map[string]string, other bool) []legendItem {
	order := make([]int, len(d.Sites))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(liveBy[b], liveBy[a]) })
	d.Colors = make([]string, len(d.Sites))
	var legend []legendItem
	for _, i := range order {
		c, ok := colors[d.Sites[i]]
		d.Colors[i] = cmp.Or(c, mapOther)
		if ok {
			legend = append(legend, legendItem{Color: template.CSS(c), // #nosec G203 -- our constant
				Text: d.Sites[i] + ": " + Bytes(liveBy[i])})
		}
	}
	if other {
		legend = append(legend, legendItem{Color: mapOther, Text: "other or unknown callsites"})
	}
	return legend
}
