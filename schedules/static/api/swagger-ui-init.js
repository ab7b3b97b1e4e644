/* Starts Swagger UI on /api/v1/docs from the schema URL on <body>. Everything is served from our
   own static files: no CDN, and no validator badge (which would call validator.swagger.io). */
"use strict";
window.ui = SwaggerUIBundle({
  url: document.body.dataset.openapiUrl,
  dom_id: "#swagger-ui",
  deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
  validatorUrl: null,
  persistAuthorization: false,
});
