package traits

// ListVersion is the version of the three lists below. Bump it whenever an
// entry is replaced, and note the change here. Lengths never change (a test
// enforces them): only the accounts on a replaced entry move.
//
// Changelog:
//   - 1: first lists.
const ListVersion = 1

// List lengths. Fixed forever: changing one would remap the whole fleet.
const (
	UserAgentCount = 30
	ProfileCount   = 20
	LanguageCount  = 12
)

// userAgents are real desktop Chrome user agents. All are Windows 10/11 x64
// (Chrome's reduced user agent is the same string on both), because the
// profiles are all Windows too: a draw of any user agent with any profile
// must be coherent (a Mac user agent with a Win32 platform would stand out).
// Since Chrome's user-agent reduction the strings differ by major version
// only; replace the oldest entries in place as Chrome moves on.
var userAgents = [UserAgentCount]string{
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/117.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/118.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/119.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/121.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/122.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/123.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/125.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/127.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/128.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/129.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/132.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/133.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/134.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/135.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/136.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/137.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/138.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/139.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/140.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/141.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/142.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/143.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/144.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/145.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/146.0.0.0 Safari/537.36",
}

// Profile is a coherent connection signature: what the page sees of the
// screen and window, and how the HTTP session orders its headers.
type Profile struct {
	Name string
	// Platform is navigator.platform.
	Platform string
	// ClientHintPlatform is the sec-ch-ua-platform value (without quotes).
	ClientHintPlatform string
	// Screen size in CSS pixels and the device scale factor.
	ScreenWidth, ScreenHeight int
	DeviceScaleFactor         float64
	// Viewport is the page's inner size in CSS pixels.
	ViewportWidth, ViewportHeight int
	// HeaderOrder is the order of request headers a navigation sends
	// (HTTP/1.1 names; the HTTP session writes its headers in this order).
	HeaderOrder []string
	// ExtraHeaders are sent on every navigation with this profile.
	ExtraHeaders map[string]string
}

// Chrome's navigation header order over HTTP/1.1.
var (
	headersNavigate = []string{
		"Host", "Connection", "sec-ch-ua", "sec-ch-ua-mobile", "sec-ch-ua-platform",
		"Upgrade-Insecure-Requests", "User-Agent", "Accept", "Sec-Fetch-Site", "Sec-Fetch-Mode",
		"Sec-Fetch-User", "Sec-Fetch-Dest", "Accept-Encoding", "Accept-Language", "Cookie",
	}
	// With "Do Not Track" switched on.
	headersNavigateDNT = []string{
		"Host", "Connection", "sec-ch-ua", "sec-ch-ua-mobile", "sec-ch-ua-platform", "DNT",
		"Upgrade-Insecure-Requests", "User-Agent", "Accept", "Sec-Fetch-Site", "Sec-Fetch-Mode",
		"Sec-Fetch-User", "Sec-Fetch-Dest", "Accept-Encoding", "Accept-Language", "Cookie",
	}
	// A user who reloads: Chrome adds Cache-Control after Connection.
	headersNavigateCacheControl = []string{
		"Host", "Connection", "Cache-Control", "sec-ch-ua", "sec-ch-ua-mobile", "sec-ch-ua-platform",
		"Upgrade-Insecure-Requests", "User-Agent", "Accept", "Sec-Fetch-Site", "Sec-Fetch-Mode",
		"Sec-Fetch-User", "Sec-Fetch-Dest", "Accept-Encoding", "Accept-Language", "Cookie",
	}
)

// profiles are common Windows desktop and laptop set-ups (maximized windows
// unless named "windowed").
var profiles = [ProfileCount]Profile{
	{Name: "win-fhd-100", Platform: "Win32", ClientHintPlatform: "Windows", ScreenWidth: 1920, ScreenHeight: 1080, DeviceScaleFactor: 1, ViewportWidth: 1920, ViewportHeight: 947, HeaderOrder: headersNavigate, ExtraHeaders: nil},
	{Name: "win-fhd-125", Platform: "Win32", ClientHintPlatform: "Windows", ScreenWidth: 1536, ScreenHeight: 864, DeviceScaleFactor: 1.25, ViewportWidth: 1536, ViewportHeight: 730, HeaderOrder: headersNavigate, ExtraHeaders: nil},
	{Name: "win-fhd-150", Platform: "Win32", ClientHintPlatform: "Windows", ScreenWidth: 1280, ScreenHeight: 720, DeviceScaleFactor: 1.5, ViewportWidth: 1280, ViewportHeight: 585, HeaderOrder: headersNavigateDNT, ExtraHeaders: map[string]string{"DNT": "1"}},
	{Name: "win-hd-100", Platform: "Win32", ClientHintPlatform: "Windows", ScreenWidth: 1366, ScreenHeight: 768, DeviceScaleFactor: 1, ViewportWidth: 1366, ViewportHeight: 633, HeaderOrder: headersNavigate, ExtraHeaders: nil},
	{Name: "win-hdplus-100", Platform: "Win32", ClientHintPlatform: "Windows", ScreenWidth: 1600, ScreenHeight: 900, DeviceScaleFactor: 1, ViewportWidth: 1600, ViewportHeight: 765, HeaderOrder: headersNavigateCacheControl, ExtraHeaders: map[string]string{"Cache-Control": "max-age=0"}},
	{Name: "win-wxgaplus-100", Platform: "Win32", ClientHintPlatform: "Windows", ScreenWidth: 1440, ScreenHeight: 900, DeviceScaleFactor: 1, ViewportWidth: 1440, ViewportHeight: 765, HeaderOrder: headersNavigate, ExtraHeaders: nil},
	{Name: "win-wsxgaplus-100", Platform: "Win32", ClientHintPlatform: "Windows", ScreenWidth: 1680, ScreenHeight: 1050, DeviceScaleFactor: 1, ViewportWidth: 1680, ViewportHeight: 915, HeaderOrder: headersNavigateDNT, ExtraHeaders: map[string]string{"DNT": "1"}},
	{Name: "win-wuxga-100", Platform: "Win32", ClientHintPlatform: "Windows", ScreenWidth: 1920, ScreenHeight: 1200, DeviceScaleFactor: 1, ViewportWidth: 1920, ViewportHeight: 1065, HeaderOrder: headersNavigate, ExtraHeaders: nil},
	{Name: "win-qhd-100", Platform: "Win32", ClientHintPlatform: "Windows", ScreenWidth: 2560, ScreenHeight: 1440, DeviceScaleFactor: 1, ViewportWidth: 2560, ViewportHeight: 1305, HeaderOrder: headersNavigate, ExtraHeaders: nil},
	{Name: "win-qhd-125", Platform: "Win32", ClientHintPlatform: "Windows", ScreenWidth: 2048, ScreenHeight: 1152, DeviceScaleFactor: 1.25, ViewportWidth: 2048, ViewportHeight: 1017, HeaderOrder: headersNavigateCacheControl, ExtraHeaders: map[string]string{"Cache-Control": "max-age=0"}},
	{Name: "win-qhd-150", Platform: "Win32", ClientHintPlatform: "Windows", ScreenWidth: 1707, ScreenHeight: 960, DeviceScaleFactor: 1.5, ViewportWidth: 1707, ViewportHeight: 825, HeaderOrder: headersNavigate, ExtraHeaders: nil},
	{Name: "win-uhd-150", Platform: "Win32", ClientHintPlatform: "Windows", ScreenWidth: 2560, ScreenHeight: 1440, DeviceScaleFactor: 1.5, ViewportWidth: 2560, ViewportHeight: 1305, HeaderOrder: headersNavigateDNT, ExtraHeaders: map[string]string{"DNT": "1"}},
	{Name: "win-uhd-200", Platform: "Win32", ClientHintPlatform: "Windows", ScreenWidth: 1920, ScreenHeight: 1080, DeviceScaleFactor: 2, ViewportWidth: 1920, ViewportHeight: 945, HeaderOrder: headersNavigate, ExtraHeaders: nil},
	{Name: "win-uwqhd-100", Platform: "Win32", ClientHintPlatform: "Windows", ScreenWidth: 3440, ScreenHeight: 1440, DeviceScaleFactor: 1, ViewportWidth: 3440, ViewportHeight: 1305, HeaderOrder: headersNavigate, ExtraHeaders: nil},
	{Name: "win-wxga-100", Platform: "Win32", ClientHintPlatform: "Windows", ScreenWidth: 1280, ScreenHeight: 800, DeviceScaleFactor: 1, ViewportWidth: 1280, ViewportHeight: 665, HeaderOrder: headersNavigateCacheControl, ExtraHeaders: map[string]string{"Cache-Control": "max-age=0"}},
	{Name: "win-sxga-100", Platform: "Win32", ClientHintPlatform: "Windows", ScreenWidth: 1280, ScreenHeight: 1024, DeviceScaleFactor: 1, ViewportWidth: 1280, ViewportHeight: 889, HeaderOrder: headersNavigate, ExtraHeaders: nil},
	{Name: "win-hd-windowed", Platform: "Win32", ClientHintPlatform: "Windows", ScreenWidth: 1366, ScreenHeight: 768, DeviceScaleFactor: 1, ViewportWidth: 1200, ViewportHeight: 600, HeaderOrder: headersNavigateDNT, ExtraHeaders: map[string]string{"DNT": "1"}},
	{Name: "win-fhd-windowed", Platform: "Win32", ClientHintPlatform: "Windows", ScreenWidth: 1920, ScreenHeight: 1080, DeviceScaleFactor: 1, ViewportWidth: 1600, ViewportHeight: 860, HeaderOrder: headersNavigate, ExtraHeaders: nil},
	{Name: "win-fhd-125-windowed", Platform: "Win32", ClientHintPlatform: "Windows", ScreenWidth: 1536, ScreenHeight: 864, DeviceScaleFactor: 1.25, ViewportWidth: 1400, ViewportHeight: 700, HeaderOrder: headersNavigateCacheControl, ExtraHeaders: map[string]string{"Cache-Control": "max-age=0"}},
	{Name: "win-hd1360-100", Platform: "Win32", ClientHintPlatform: "Windows", ScreenWidth: 1360, ScreenHeight: 768, DeviceScaleFactor: 1, ViewportWidth: 1360, ViewportHeight: 633, HeaderOrder: headersNavigate, ExtraHeaders: nil},
}

// Language sets Accept-Language and the browser's locale.
type Language struct {
	Tag            string
	AcceptLanguage string
	Locale         string
}

// languages are the languages of the operators' own staff; each keeps
// English as a fallback, as such browsers do.
var languages = [LanguageCount]Language{
	{Tag: "en-US", AcceptLanguage: "en-US,en;q=0.9", Locale: "en-US"},
	{Tag: "en-GB", AcceptLanguage: "en-GB,en-US;q=0.9,en;q=0.8", Locale: "en-GB"},
	{Tag: "en-CA", AcceptLanguage: "en-CA,en-US;q=0.9,en;q=0.8", Locale: "en-CA"},
	{Tag: "es-US", AcceptLanguage: "es-US,es;q=0.9,en-US;q=0.8,en;q=0.7", Locale: "es-US"},
	{Tag: "es-MX", AcceptLanguage: "es-MX,es;q=0.9,en-US;q=0.8,en;q=0.7", Locale: "es-MX"},
	{Tag: "fr-CA", AcceptLanguage: "fr-CA,fr;q=0.9,en-US;q=0.8,en;q=0.7", Locale: "fr-CA"},
	{Tag: "pt-BR", AcceptLanguage: "pt-BR,pt;q=0.9,en-US;q=0.8,en;q=0.7", Locale: "pt-BR"},
	{Tag: "pl-PL", AcceptLanguage: "pl-PL,pl;q=0.9,en-US;q=0.8,en;q=0.7", Locale: "pl-PL"},
	{Tag: "uk-UA", AcceptLanguage: "uk-UA,uk;q=0.9,en-US;q=0.8,en;q=0.7", Locale: "uk-UA"},
	{Tag: "ru-RU", AcceptLanguage: "ru-RU,ru;q=0.9,en-US;q=0.8,en;q=0.7", Locale: "ru-RU"},
	{Tag: "ro-RO", AcceptLanguage: "ro-RO,ro;q=0.9,en-US;q=0.8,en;q=0.7", Locale: "ro-RO"},
	{Tag: "de-DE", AcceptLanguage: "de-DE,de;q=0.9,en-US;q=0.8,en;q=0.7", Locale: "de-DE"},
}

// UserAgents returns a copy of the user-agent list.
func UserAgents() []string { return append([]string(nil), userAgents[:]...) }

// Profiles returns a copy of the profile list.
func Profiles() []Profile { return append([]Profile(nil), profiles[:]...) }

// Languages returns a copy of the language list.
func Languages() []Language { return append([]Language(nil), languages[:]...) }
