/* ui_page.h — the web page's files (src/ui/page), compiled in as byte arrays by src/ui/embed.cmake. */
#ifndef TR_UI_PAGE_H
#define TR_UI_PAGE_H

#include <stddef.h>

typedef struct ui_asset {
    const char *name;           /* file name, e.g. "app.js" */
    const unsigned char *data;  /* size bytes (plus a NUL not counted) */
    size_t size;
} ui_asset;

extern const ui_asset ui_assets[];
extern const size_t ui_n_assets;

#endif /* TR_UI_PAGE_H */
