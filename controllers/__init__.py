"""os-ken apps: thin shims that translate fabric's routing intents into OpenFlow.

``POLICIES`` maps a policy name to the module holding its app; the modules
import os-ken, so they are only imported by the launcher.
"""

POLICIES = {"ecmp": "controllers.ecmp"}
