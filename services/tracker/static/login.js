// The login page a read-protected server serves instead of any page, to a browser without a session.
"use strict";

showLogin();
