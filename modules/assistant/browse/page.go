package browse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"
)

// Item is one line of the compact page view: a text passage, or a
// numbered interactive element.
type Item struct {
	N           int    `json:"n"` // 0 for text
	Text        string `json:"text"`
	Role        string `json:"role,omitempty"`
	Value       string `json:"value,omitempty"`
	Placeholder string `json:"placeholder,omitempty"`
}

// View is what read_page sees.
type View struct {
	URL   string `json:"url"`
	Title string `json:"title"`
	Items []Item `json:"items"`
	// Hidden counts the text passages left out because a person could
	// not see them.
	Hidden int `json:"hidden"`
}

// readJS numbers the visible interactive elements (data-fw-el) and
// collects visible text in document order. A subtree is hidden when it is
// not rendered (display, visibility, hidden attribute, content-visibility),
// aria-hidden, transparent, zero-size, clipped away, off-screen to the
// left or top, or has zero font size: text a person cannot see is not
// given to the model at all.
const readJS = `() => {
  for (const e of document.querySelectorAll('[data-fw-el]')) e.removeAttribute('data-fw-el');
  const items = []; let n = 0, hidden = 0; let buf = [];
  const sx = window.scrollX, sy = window.scrollY;
  const flush = () => { const t = buf.join(' ').replace(/\s+/g, ' ').trim(); if (t) items.push({n: 0, text: t}); buf = []; };
  const isHidden = (el) => {
    if (el.hidden || el.getAttribute('aria-hidden') === 'true' || el.inert) return true;
    const cs = getComputedStyle(el);
    if (cs.display === 'none' || cs.visibility === 'hidden' || cs.visibility === 'collapse' || cs.contentVisibility === 'hidden') return true;
    if (parseFloat(cs.opacity) === 0) return true;
    if (cs.display === 'contents') return false;
    if (parseFloat(cs.fontSize) === 0 && el.children.length === 0) return true;
    if (/rect\(0(px)?,? 0(px)?,? 0(px)?,? 0(px)?\)/.test(cs.clip) || cs.clipPath === 'inset(50%)') return true;
    const r = el.getBoundingClientRect();
    if ((r.width < 1 || r.height < 1) && (cs.overflow === 'hidden' || el.children.length === 0)) return true;
    if (r.right + sx <= 0 || r.bottom + sy <= 0) return true;
    if (cs.textIndent && parseFloat(cs.textIndent) < -999) return true;
    return false;
  };
  const interactive = (el) => {
    const t = el.tagName;
    if (t === 'A' && el.hasAttribute('href')) return 'link';
    if (t === 'BUTTON') return 'button';
    if (t === 'SELECT') return 'select';
    if (t === 'TEXTAREA') return 'textarea';
    if (t === 'INPUT') { const ty = (el.type || 'text').toLowerCase(); if (ty === 'hidden') return ''; if (ty === 'submit' || ty === 'button' || ty === 'reset') return 'button'; if (ty === 'checkbox' || ty === 'radio') return ty; return 'textbox:' + ty; }
    if (el.isContentEditable && (!el.parentElement || !el.parentElement.isContentEditable)) return 'editor';
    const role = el.getAttribute('role');
    if (role && /^(button|link|tab|menuitem|checkbox|switch|option)$/.test(role)) return role;
    return '';
  };
  const nameOf = (el) => {
    let s = el.getAttribute('aria-label') || '';
    if (!s && el.labels && el.labels.length) s = Array.from(el.labels).map(l => l.innerText).join(' ');
    if (!s && (el.tagName === 'INPUT' && /^(submit|button|reset)$/i.test(el.type))) s = el.value;
    if (!s && el.tagName !== 'TEXTAREA' && el.tagName !== 'INPUT' && el.tagName !== 'SELECT') s = el.innerText;
    if (!s) s = el.getAttribute('title') || el.getAttribute('alt') || el.getAttribute('name') || '';
    return s.replace(/\s+/g, ' ').trim().slice(0, 160);
  };
  const BLOCK = /^(P|DIV|SECTION|ARTICLE|MAIN|HEADER|FOOTER|NAV|ASIDE|H[1-6]|LI|UL|OL|TABLE|TR|TD|TH|FORM|FIELDSET|LABEL|BLOCKQUOTE|PRE|DL|DT|DD|FIGCAPTION|BR|HR)$/;
  const walk = (node) => {
    for (const c of node.childNodes) {
      if (c.nodeType === 3) { if (c.textContent.trim()) buf.push(c.textContent); continue; }
      if (c.nodeType !== 1) continue;
      const t = c.tagName;
      if (t === 'SCRIPT' || t === 'STYLE' || t === 'NOSCRIPT' || t === 'TEMPLATE' || t === 'HEAD' || t === 'META' || t === 'LINK') continue;
      if (isHidden(c)) { if (c.textContent.trim()) hidden++; continue; }
      const role = interactive(c);
      if (role) {
        flush();
        n++; c.setAttribute('data-fw-el', String(n));
        let value = '';
        if (c.tagName === 'SELECT') value = c.selectedOptions.length ? c.selectedOptions[0].text : '';
        else if (c.tagName === 'TEXTAREA' || c.tagName === 'INPUT') value = (/^textbox:password$/.test(role)) ? (c.value ? '(hidden)' : '') : (/checkbox|radio/.test(role) ? (c.checked ? 'checked' : 'unchecked') : c.value);
        else if (role === 'editor') value = c.innerText;
        items.push({n, text: nameOf(c), role, value: (value || '').slice(0, 2000), placeholder: c.getAttribute('placeholder') || ''});
        if (role === 'select') { const opts = Array.from(c.options).map(o => o.text).join(' | '); if (opts) items[items.length-1].text += ' [options: ' + opts.slice(0, 300) + ']'; }
        continue;
      }
      const block = BLOCK.test(t);
      if (block) flush();
      walk(c);
      if (block) flush();
    }
  };
  if (document.body) walk(document.body);
  flush();
  return {url: location.href, title: document.title, items, hidden};
}`

// Read numbers the visible elements of the tab and returns its view.
func (s *Session) Read(ctx context.Context, id string) (View, error) {
	p, err := s.Page(id)
	if err != nil {
		return View{}, err
	}
	res, err := p.Context(ctx).Timeout(20 * time.Second).Eval(readJS)
	if err != nil {
		return View{}, fmt.Errorf("browse: read page: %w", err)
	}
	var v View
	if err := json.Unmarshal([]byte(res.Value.JSON("", "")), &v); err != nil {
		return View{}, fmt.Errorf("browse: read page: %w", err)
	}
	return v, nil
}

// Field is one value a form would submit.
type Field struct {
	Name         string `json:"name"`
	Label        string `json:"label"`
	Type         string `json:"type"`
	Value        string `json:"value"`
	Autocomplete string `json:"autocomplete"`
}

// ElementInfo is everything the gate looks at before an action.
type ElementInfo struct {
	N          int     `json:"n"`
	Tag        string  `json:"tag"`
	Type       string  `json:"type"`
	Role       string  `json:"role"`
	Text       string  `json:"text"`
	Label      string  `json:"label"`
	Title      string  `json:"title"`
	Value      string  `json:"value"`
	ID         string  `json:"id"`
	Name       string  `json:"name"`
	Href       string  `json:"href"`
	InForm     bool    `json:"in_form"`
	Submits    bool    `json:"submits"`
	FormAction string  `json:"form_action"`
	FormMethod string  `json:"form_method"`
	FormText   string  `json:"form_text"`
	Fields     []Field `json:"fields"`
	PageURL    string  `json:"page_url"`
	DataAction string  `json:"data_action"`
	// FormTargets is every URL the element's form can be sent to: its
	// action and each submit button's formaction.
	FormTargets []string `json:"form_targets"`
	// Download is set on a link with a download attribute.
	Download bool `json:"download"`
	// Options are a select's option texts.
	Options []string `json:"options"`
}

const infoJS = `(n) => {
  const el = document.querySelector('[data-fw-el="' + n + '"]');
  if (!el) return null;
  const lab = (e) => { let s = e.getAttribute('aria-label') || ''; if (!s && e.labels && e.labels.length) s = Array.from(e.labels).map(l => l.innerText).join(' '); return (s || e.getAttribute('placeholder') || e.name || '').replace(/\s+/g,' ').trim(); };
  const form = el.form || el.closest('form');
  const ty = (el.getAttribute('type') || '').toLowerCase();
  const submits = !!form && ((el.tagName === 'BUTTON' && ty !== 'button' && ty !== 'reset') || (el.tagName === 'INPUT' && (ty === 'submit' || ty === 'image')));
  const out = {n, tag: el.tagName.toLowerCase(), type: ty, role: el.getAttribute('role') || '', text: (el.innerText || '').replace(/\s+/g,' ').trim().slice(0, 300),
    label: lab(el), title: el.getAttribute('title') || '', value: (el.tagName === 'INPUT' && ty === 'password') ? '' : (el.value || ''), id: el.id || '', name: el.getAttribute('name') || '',
    href: el.href ? String(el.href) : '', in_form: !!form, submits, form_action: '', form_method: '', form_text: '', fields: [], page_url: location.href,
    data_action: [el.getAttribute('data-action'), el.getAttribute('formaction'), el.getAttribute('onclick')].filter(Boolean).join(' '),
    form_targets: [], download: el.tagName === 'A' && el.hasAttribute('download'), options: el.tagName === 'SELECT' ? Array.from(el.options).map(o => (o.text || '').trim()) : []};
  if (form) {
    out.form_action = (submits && el.hasAttribute('formaction')) ? String(el.formAction) : String(form.action || location.href);
    out.form_method = ((submits && el.getAttribute('formmethod')) || form.getAttribute('method') || 'get').toLowerCase();
    out.form_text = [form.getAttribute('aria-label') || '', form.id, form.getAttribute('name') || '', form.getAttribute('data-action') || ''].join(' ').trim();
    const targets = new Set([String(form.action || location.href)]);
    for (const b of form.querySelectorAll('button, input[type=submit], input[type=image]')) if (b.form === form && b.hasAttribute('formaction')) targets.add(String(b.formAction));
    for (const b of document.querySelectorAll('[form]')) if (b.form === form && b.hasAttribute('formaction')) targets.add(String(b.formAction));
    out.form_targets = Array.from(targets);
    for (const f of form.elements) {
      if (!f.name && !f.id) continue;
      const t = (f.type || f.tagName).toLowerCase();
      if (t === 'submit' || t === 'button' || t === 'reset' || t === 'fieldset') continue;
      out.fields.push({name: f.name || f.id, label: lab(f), type: t, value: (t === 'checkbox' || t === 'radio') ? (f.checked ? f.value : '') : (f.value || ''), autocomplete: f.getAttribute('autocomplete') || ''});
    }
  }
  return out;
}`

// ErrNoElement is returned for a number read_page did not give out.
var ErrNoElement = errors.New("browse: no element with that number: read the page again")

// Info describes element n of the tab for the gate.
func (s *Session) Info(ctx context.Context, id string, n int) (ElementInfo, error) {
	p, err := s.Page(id)
	if err != nil {
		return ElementInfo{}, err
	}
	res, err := p.Context(ctx).Timeout(10*time.Second).Eval(infoJS, n)
	if err != nil {
		return ElementInfo{}, fmt.Errorf("browse: element %d: %w", n, err)
	}
	if res.Value.Nil() {
		return ElementInfo{}, ErrNoElement
	}
	var info ElementInfo
	if err := json.Unmarshal([]byte(res.Value.JSON("", "")), &info); err != nil {
		return ElementInfo{}, fmt.Errorf("browse: element %d: %w", n, err)
	}
	return info, nil
}

func (s *Session) element(ctx context.Context, id string, n int) (*rod.Page, *rod.Element, error) {
	p, err := s.Page(id)
	if err != nil {
		return nil, nil, err
	}
	p = p.Context(ctx).Timeout(15 * time.Second)
	els, err := p.Elements(`[data-fw-el="` + strconv.Itoa(n) + `"]`)
	if err != nil {
		return nil, nil, fmt.Errorf("browse: element %d: %w", n, err)
	}
	if len(els) != 1 {
		return nil, nil, ErrNoElement
	}
	return p, els[0], nil
}

// Highlighted captures the viewport with element n outlined, for the
// approval screen.
func (s *Session) Highlighted(ctx context.Context, id string, n int) ([]byte, error) {
	p, el, err := s.element(ctx, id, n)
	if err != nil {
		return nil, err
	}
	_ = el.ScrollIntoView()
	const on = `function () { this.dataset.fwOutline = this.style.outline; this.style.outline = '4px solid #e0245e'; this.style.outlineOffset = '2px'; }`
	const off = `function () { this.style.outline = this.dataset.fwOutline || ''; this.style.outlineOffset = ''; delete this.dataset.fwOutline; }`
	if _, err := el.Evaluate(rod.Eval(on).ByUser()); err != nil {
		return nil, fmt.Errorf("browse: highlight: %w", err)
	}
	defer func() { _, _ = el.Evaluate(rod.Eval(off).ByUser()) }()
	b, err := p.Screenshot(false, &proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatPng})
	if err != nil {
		return nil, fmt.Errorf("browse: screenshot: %w", err)
	}
	return b, nil
}

// Click clicks element n like a person (a real mouse event) and waits
// until the page's requests settle, at most settle.
func (s *Session) Click(ctx context.Context, id string, n int, settle time.Duration) error {
	p, el, err := s.element(ctx, id, n)
	if err != nil {
		return err
	}
	idle := p.Timeout(settle).WaitRequestIdle(300*time.Millisecond, nil, nil, nil)
	if err := el.Click(proto.InputMouseButtonLeft, 1); err != nil {
		return fmt.Errorf("browse: click %d: %w", n, err)
	}
	idle()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

// Type replaces the contents of field n with text.
func (s *Session) Type(ctx context.Context, id string, n int, text string) error {
	_, el, err := s.element(ctx, id, n)
	if err != nil {
		return err
	}
	if err := el.SelectAllText(); err != nil {
		// contenteditable and a few input types cannot select: clear by script.
		_, _ = el.Evaluate(rod.Eval(`function () { if ('value' in this) this.value = ''; else this.textContent = ''; }`).ByUser())
		_ = el.Focus()
	}
	if err := el.Input(text); err != nil {
		return fmt.Errorf("browse: type into %d: %w", n, err)
	}
	return nil
}

// SetField sets a form field of element n's form by name (an edited value
// from the approval screen).
func (s *Session) SetField(ctx context.Context, id string, n int, name, value string) error {
	_, el, err := s.element(ctx, id, n)
	if err != nil {
		return err
	}
	_, err = el.Evaluate(rod.Eval(`function (name, value) {
	  const form = this.form || this.closest('form'); if (!form) throw new Error('no form');
	  const f = form.elements.namedItem(name) || form.querySelector('#' + CSS.escape(name)); if (!f) throw new Error('no field ' + name);
	  f.value = value; f.dispatchEvent(new Event('input', {bubbles: true})); f.dispatchEvent(new Event('change', {bubbles: true}));
	}`, name, value).ByUser())
	if err != nil {
		return fmt.Errorf("browse: set field %s: %w", name, err)
	}
	return nil
}

// Select picks the option of select n whose text is value.
func (s *Session) Select(ctx context.Context, id string, n int, value string) error {
	_, el, err := s.element(ctx, id, n)
	if err != nil {
		return err
	}
	if err := el.Select([]string{value}, true, rod.SelectorTypeText); err != nil {
		return fmt.Errorf("browse: select %q in %d: %w", value, n, err)
	}
	return nil
}

// Scroll scrolls the tab by most of a screen.
func (s *Session) Scroll(ctx context.Context, id string, down bool) error {
	p, err := s.Page(id)
	if err != nil {
		return err
	}
	js := `() => window.scrollBy(0, window.innerHeight * 0.8)`
	if !down {
		js = `() => window.scrollBy(0, -window.innerHeight * 0.8)`
	}
	if _, err := p.Context(ctx).Eval(js); err != nil {
		return fmt.Errorf("browse: scroll: %w", err)
	}
	return nil
}

// Extract returns the visible text of element n (or of the page for 0).
func (s *Session) Extract(ctx context.Context, id string, n int) (string, error) {
	p, err := s.Page(id)
	if err != nil {
		return "", err
	}
	res, err := p.Context(ctx).Timeout(10*time.Second).Eval(`(n) => { const el = n ? document.querySelector('[data-fw-el="' + n + '"]') : document.body; return el ? (el.innerText || el.value || '') : null; }`, n)
	if err != nil {
		return "", fmt.Errorf("browse: extract: %w", err)
	}
	if res.Value.Nil() {
		return "", ErrNoElement
	}
	return res.Value.Str(), nil
}
