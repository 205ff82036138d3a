"""os-ken apps: thin shims that translate fabric's routing intents into OpenFlow.

``POLICIES`` maps a policy name to the module holding its app; the modules
import os-ken, so only the launcher imports them.
"""

POLICIES = {"ecmp": "controllers.ecmp", "spray": "controllers.spray",
            "adaptive": "controllers.adaptive", "static": "controllers.static",
            "ar": "controllers.ar"}
